package remotes

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"

	"github.com/meshfed/meshfed/pkg/model"
)

// Networks. A cluster's network is its system namespace's
// model.LabelTopologyNetwork, else the remote secret's AnnotationNetwork;
// a Pod's is its own label, else its cluster's. A Service carrying the
// label and the gateway port is a gateway of that network (gatewayOf).

// DefaultSystemNamespace is where a remote cluster says its network, as
// Istio's system namespace.
const DefaultSystemNamespace = "istio-system"

// Resolver finds the addresses of a host name: a gateway whose load
// balancer has a hostname, not an IP.
type Resolver func(ctx context.Context, host string) ([]netip.Addr, error)

// networkOf is the network of an endpoint whose Pod has labels (zero
// labels: no Pod known) in a cluster on network cluster.
func networkOf(labels model.Labels, cluster model.Network) model.Network {
	if n, ok := labels.Get(model.LabelTopologyNetwork); ok && n != "" {
		return model.Network(n)
	}
	return cluster
}

// gatewayOf returns what svc says as a gateway of its network, nil when it
// is none: it carries model.LabelTopologyNetwork and a port numbered as its
// model.AnnotationGatewayPort says (else model.DefaultGatewayPort). Its
// addresses are its load balancer's (a hostname resolved by resolve), else
// its spec.externalIPs; without any, Problem says so. It does I/O only
// through resolve.
func gatewayOf(ctx context.Context, svc *corev1.Service, resolve Resolver) *model.NetworkGateway {
	network := svc.Labels[model.LabelTopologyNetwork]
	if network == "" {
		return nil
	}
	gw := &model.NetworkGateway{Network: model.Network(network), Port: model.DefaultGatewayPort}
	if v := svc.Annotations[model.AnnotationGatewayPort]; v != "" {
		p, err := strconv.ParseUint(strings.TrimSpace(v), 10, 16)
		if err != nil || p == 0 {
			gw.Problem = fmt.Sprintf("annotation %s=%q is not a port number", model.AnnotationGatewayPort, v)
			return gw
		}
		gw.Port = uint32(p)
	}
	if !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return uint32(p.Port) == gw.Port }) {
		// Istio's rule: a labelled Service without the port is no gateway
		// (a network label on an ordinary Service is common).
		return nil
	}
	var problems []string
	for _, in := range svc.Status.LoadBalancer.Ingress {
		switch {
		case in.IP != "":
			if a, err := netip.ParseAddr(in.IP); err == nil {
				gw.Addresses = append(gw.Addresses, a.Unmap())
			} else {
				problems = append(problems, fmt.Sprintf("load balancer IP %q does not parse", in.IP))
			}
		case in.Hostname != "":
			if resolve == nil {
				problems = append(problems, fmt.Sprintf("load balancer hostname %q: no resolver", in.Hostname))
				continue
			}
			addrs, err := resolve(ctx, in.Hostname)
			if err != nil {
				problems = append(problems, fmt.Sprintf("load balancer hostname %q: %v", in.Hostname, err))
			}
			for _, a := range addrs {
				gw.Addresses = append(gw.Addresses, a.Unmap())
			}
		}
	}
	if len(gw.Addresses) == 0 {
		for _, ip := range svc.Spec.ExternalIPs {
			if a, err := netip.ParseAddr(ip); err == nil {
				gw.Addresses = append(gw.Addresses, a.Unmap())
			}
		}
	}
	slices.SortFunc(gw.Addresses, netip.Addr.Compare)
	gw.Addresses = slices.Compact(gw.Addresses)
	if len(gw.Addresses) == 0 {
		problems = append(problems, "no address in status.loadBalancer.ingress or spec.externalIPs")
		gw.Problem = strings.Join(problems, "; ")
	}
	return gw
}

// networkCollector reports the fleet's network gateways (store.Store's
// view) as meshfed_network_gateway_problems{reason} and
// meshfed_network_gateway_addresses{network}, read when scraped.
type networkCollector struct {
	view      func() *model.NetworkGateways
	problems  *prometheus.Desc
	addresses *prometheus.Desc
}

// RegisterNetworkMetrics registers the network gateway metrics of view
// (the store's NetworkGateways) on reg.
func RegisterNetworkMetrics(reg prometheus.Registerer, view func() *model.NetworkGateways) {
	reg.MustRegister(&networkCollector{
		view: view,
		problems: prometheus.NewDesc("meshfed_network_gateway_problems",
			"Problems of the fleet's network gateways, by reason: no_address (a gateway Service with no load balancer address or external IP), address_conflict (an address two networks' gateways claim, used by neither), no_gateway (a network whose endpoints no gateway reaches); /debug/registryz names each.",
			[]string{"reason"}, nil),
		addresses: prometheus.NewDesc("meshfed_network_gateway_addresses",
			"Usable gateway addresses of each network, through which proxies of other networks reach its endpoints.",
			[]string{"network"}, nil),
	})
}

func (c *networkCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.problems
	ch <- c.addresses
}

func (c *networkCollector) Collect(ch chan<- prometheus.Metric) {
	v := c.view()
	counts := map[string]int{model.ProblemNoAddress: 0, model.ProblemAddressConflict: 0, model.ProblemNoGateway: 0}
	for _, p := range v.Problems {
		counts[p.Reason]++
	}
	for reason, n := range counts {
		ch <- prometheus.MustNewConstMetric(c.problems, prometheus.GaugeValue, float64(n), reason)
	}
	for n, addrs := range v.ByNetwork {
		ch <- prometheus.MustNewConstMetric(c.addresses, prometheus.GaugeValue, float64(len(addrs)), string(n))
	}
}
