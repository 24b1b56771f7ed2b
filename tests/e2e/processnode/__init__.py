"""Process node: a kubelet stand-in for the e2e test bed (see docs/testing.md).

It registers a Node and runs the pods bound to it as local process groups, each pod on its own
127.0.0.0/8 address, with volumes, service-account tokens and Service DNS provided the way a
kubelet plus cluster DNS would. Test infrastructure only: the product never refers to it.
"""
