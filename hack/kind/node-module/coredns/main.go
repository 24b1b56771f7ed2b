// CoreDNS with only the plugins a kubeadm cluster's Corefile names. The upstream binary links
// every plugin (cloud DNS providers' SDKs among them), which made it the bed's longest cold
// build; built here in the node module, it shares the Kubernetes client packages kubelet has
// just compiled.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/metrics"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
)

// The chain's order is upstream's plugin.cfg order, restricted to the plugins above.
func init() {
	dnsserver.Directives = []string{
		"reload", "ready", "health", "prometheus", "errors", "log",
		"loadbalance", "cache", "kubernetes", "loop", "forward",
	}
}

func main() { coremain.Run() }
