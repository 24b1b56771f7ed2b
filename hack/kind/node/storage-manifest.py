"""Writes kind's default-storage manifest (a Go raw string in kind's nodeimage package) to a
file and prints the images it names, one per line: provisioner first, then helper.

    python3 storage-manifest.py <kind>/pkg/build/nodeimage/const_storage.go out.yaml
"""

import re
import sys


def main(source: str, out: str) -> None:
    text = open(source).read()
    images = dict(re.findall(r'const (storage\w+Image) = "([^"]+)"', text))
    body = text.split("const defaultStorageManifest = `", 1)[1].rsplit("`", 1)[0]
    body = re.sub(r"` \+ (\w+) \+ `", lambda m: images[m.group(1)], body)
    open(out, "w").write(body)
    print(images["storageProvisionerImage"])
    print(images["storageHelperImage"])


if __name__ == "__main__":
    main(*sys.argv[1:])
