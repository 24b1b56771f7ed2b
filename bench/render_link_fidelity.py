"""link.md's gradient-fidelity section, from link-fidelity.json alone (bench/link_fidelity.py)."""
from __future__ import annotations

import statistics

HALOS = ("cut", "self", "neighbours")
WHENS = ("init", "trained")
TRAIN_EPOCHS, TRAIN_LR = 20, 0.001  # lr: the rate bench/link.py chose for every graph; at 0.01 Amazon-Photo's ReLUs die
# (label, grappa.correction, grappa.shrinkage); node l=0.5 is Grappa's default
REDUCERS = (("UW", "none", 1.0), ("node l=0.5", "node", 0.5), ("node l=1", "node", 1.0))
DEFAULT = "node l=0.5"


def fidelity_key(ds: str, layers: int, p: int, halo: str, when: str) -> str:
    return f"{ds}|{layers}|{p}|{halo}|{when}"


def _cell(fid: dict, key: str, reducer: str = DEFAULT) -> str:
    r = fid.get(key, {}).get("reducers", {}).get(reducer)
    return f"{r['rel_error']:.3f} / {r['cosine']:.3f}" if r else "not measured"


def fidelity_section(fid: dict) -> list[str]:
    lines = ["## Gradient fidelity", "",
             "Relative error ||G - G*|| / ||G*|| and cosine similarity of Grappa's aggregated gradient G "
             "against the exact full-graph gradient G* (strategies/grappa/fidelity.py): at fixed "
             "parameters, full-graph steps, dropout off, losses as expectations over the uniform "
             "negatives (every node for G*, a worker's owned nodes for its shard), mean over partition "
             "seeds and the first rounds; GCN, dot decoder. 'init': at initialisation; 'trained': after "
             f"{TRAIN_EPOCHS} single-process full-graph epochs at lr {TRAIN_LR}. Cells: relative error / "
             f"cosine with Grappa's default reducer (`{DEFAULT}`: grappa.correction node, shrinkage 0.5), "
             "per halo mode; the last column with no correction (UW) and the default halo.", ""]
    if not fid:
        return lines + ["Not measured yet (`python bench/link.py --fidelity-only`).", ""]
    settings = sorted({tuple(k.split("|")[:3]) + (k.split("|")[4],) for k in fid},
                      key=lambda s: (s[0], int(s[1]), int(s[2]), WHENS.index(s[3])))
    lines += ["| graph | layers | P | parameters | halo cut | halo self | halo neighbours | neighbours, UW |",
              "|---|---|---|---|---|---|---|---|"]
    for ds, L, p, when in settings:
        cells = [_cell(fid, fidelity_key(ds, L, p, h, when)) for h in HALOS]
        uw = _cell(fid, fidelity_key(ds, L, p, "neighbours", when), "UW")
        lines.append(f"| {ds} | {L} | {p} | {when} | " + " | ".join(cells) + f" | {uw} |")
    lines.append("")
    err = {h: [fid[fidelity_key(ds, L, p, h, w)]["reducers"][DEFAULT]["rel_error"]
               for ds, L, p, w in settings if fidelity_key(ds, L, p, h, w) in fid] for h in HALOS}
    both = [(fid[fidelity_key(*s[:3], "cut", s[3])]["reducers"][DEFAULT]["rel_error"],
             fid[fidelity_key(*s[:3], "neighbours", s[3])]["reducers"][DEFAULT]["rel_error"])
            for s in settings if all(fidelity_key(*s[:3], h, s[3]) in fid for h in ("cut", "neighbours"))]
    lines.append("Mean relative error: " + ", ".join(
        f"halo {h} {statistics.mean(v):.3f} ({len(v)} settings)" for h, v in err.items() if v) + ".")
    if both:
        lower = sum(n < c for c, n in both)
        lines.append(f"The neighbours halo has the lower error than the cut halo in {lower} of {len(both)} settings.")
    corr = [(fid[fidelity_key(*s[:3], "neighbours", s[3])]["reducers"]["UW"]["rel_error"],
             fid[fidelity_key(*s[:3], "neighbours", s[3])]["reducers"][DEFAULT]["rel_error"])
            for s in settings if fidelity_key(*s[:3], "neighbours", s[3]) in fid]
    if corr:
        lower = sum(d < u for u, d in corr)
        lines.append(f"With the neighbours halo the default correction lowers the error against UW in "
                     f"{lower} of {len(corr)} settings (mean change "
                     f"{statistics.mean(d - u for u, d in corr):+.3f}).")
    return lines + [""]
