package remotes

import (
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/meshfed/meshfed/pkg/model"
)

// Topology labels of a Node that give its endpoints' locality.
const (
	LabelRegion  = model.LabelTopologyRegion
	LabelZone    = model.LabelTopologyZone
	LabelSubZone = model.LabelTopologySubZone
)

// serviceFromKube converts a Kubernetes Service. It is pure.
func serviceFromKube(svc *corev1.Service, domainSuffix string) *model.Service {
	out := &model.Service{
		Hostname:  model.ServiceHostname(svc.Name, svc.Namespace, domainSuffix),
		Name:      svc.Name,
		Namespace: svc.Namespace,
		Ports:     make([]model.ServicePort, 0, len(svc.Spec.Ports)),
	}
	for _, p := range svc.Spec.Ports {
		out.Ports = append(out.Ports, model.ServicePort{
			Name:     p.Name,
			Port:     uint32(p.Port),
			Protocol: portProtocol(p.Name, p.AppProtocol),
		})
	}
	return out
}

// portProtocol follows Istio's rules: appProtocol first, then the port
// name's prefix (grpc, grpc-web, http, http2), else TCP.
func portProtocol(name string, appProtocol *string) model.Protocol {
	pick := func(s string) (model.Protocol, bool) {
		switch strings.ToLower(s) {
		case "grpc", "grpc-web":
			return model.ProtocolGRPC, true
		case "http":
			return model.ProtocolHTTP, true
		case "http2", "kubernetes.io/h2c":
			return model.ProtocolHTTP2, true
		}
		return "", false
	}
	if appProtocol != nil {
		if p, ok := pick(*appProtocol); ok {
			return p
		}
	}
	prefix, _, _ := strings.Cut(name, "-")
	if p, ok := pick(prefix); ok {
		return p
	}
	return model.ProtocolTCP
}

// localityOf reads a Node's topology labels.
func localityOf(node *corev1.Node) model.Locality {
	if node == nil {
		return model.Locality{}
	}
	return model.Locality{
		Region:  node.Labels[LabelRegion],
		Zone:    node.Labels[LabelZone],
		SubZone: node.Labels[LabelSubZone],
	}
}

// endpointLookup resolves what an EndpointSlice only refers to.
type endpointLookup struct {
	node func(name string) *corev1.Node
	pod  func(namespace, name string) *podInfo
}

// endpointsFromSlices joins a Service's EndpointSlices with their Nodes and
// Pods, on network (the cluster's) unless its Pod says another. An address listed by several slices (as during a slice rollover)
// appears once, ready if any slice says so. The result is in canonical order.
func endpointsFromSlices(c model.ClusterID, network model.Network, slices []*discoveryv1.EndpointSlice, look endpointLookup) []model.Endpoint {
	// The shard keeps out as it is: sized once, it wastes no capacity
	// (an endpoint is 144 bytes).
	n := 0
	for _, sl := range slices {
		for i := range sl.Endpoints {
			n += len(sl.Endpoints[i].Addresses)
		}
	}
	byAddr := make(map[netip.Addr]int, n)
	out := make([]model.Endpoint, 0, n)
	for _, sl := range slices {
		if !hasIPs(sl) {
			continue
		}
		ports := make(map[string]uint32, len(sl.Ports))
		for _, p := range sl.Ports {
			if p.Port == nil {
				continue
			}
			name := ""
			if p.Name != nil {
				name = *p.Name
			}
			ports[name] = uint32(*p.Port)
		}
		for i := range sl.Endpoints {
			ke := &sl.Endpoints[i]
			ready := ke.Conditions.Ready == nil || *ke.Conditions.Ready
			var loc model.Locality
			if ke.NodeName != nil {
				loc = localityOf(look.node(*ke.NodeName))
			}
			var sa, pod string
			var labels model.Labels
			epNetwork := network
			if ref, ok := podOfEndpoint(sl, ke); ok {
				pod = ref.Name
				if p := look.pod(ref.Namespace, ref.Name); p != nil {
					sa, labels = p.serviceAccount(), p.labels // labels interned already
					epNetwork = networkOf(labels, network)
				}
			}
			for _, a := range ke.Addresses {
				addr, err := netip.ParseAddr(a)
				if err != nil {
					continue
				}
				if j, seen := byAddr[addr]; seen {
					out[j].Ready = out[j].Ready || ready
					continue
				}
				byAddr[addr] = len(out)
				out = append(out, model.Endpoint{
					Cluster: c, Address: addr, Locality: loc, Network: epNetwork, Ready: ready,
					ServiceAccount: sa, Pod: pod, Labels: labels, Ports: ports,
				})
			}
		}
	}
	model.SortEndpoints(out)
	return out
}

// hasIPs tells the slices whose endpoints endpointsFromSlices reads.
func hasIPs(sl *discoveryv1.EndpointSlice) bool {
	return sl.AddressType == discoveryv1.AddressTypeIPv4 || sl.AddressType == discoveryv1.AddressTypeIPv6
}

// podOfEndpoint returns the Pod endpoint ke of slice sl refers to.
func podOfEndpoint(sl *discoveryv1.EndpointSlice, ke *discoveryv1.Endpoint) (types.NamespacedName, bool) {
	ref := ke.TargetRef
	if ref == nil || ref.Kind != "Pod" {
		return types.NamespacedName{}, false
	}
	ns := ref.Namespace
	if ns == "" {
		ns = sl.Namespace
	}
	return types.NamespacedName{Namespace: ns, Name: ref.Name}, true
}

// endpointRefs returns the Pods and Nodes endpointsFromSlices looks up for
// slices (a Node repeated by consecutive endpoints once).
func endpointRefs(slices []*discoveryv1.EndpointSlice) (pods []types.NamespacedName, nodes []string) {
	for _, sl := range slices {
		if !hasIPs(sl) {
			continue
		}
		for i := range sl.Endpoints {
			ke := &sl.Endpoints[i]
			if p, ok := podOfEndpoint(sl, ke); ok {
				pods = append(pods, p)
			}
			if n := ke.NodeName; n != nil && (len(nodes) == 0 || nodes[len(nodes)-1] != *n) {
				nodes = append(nodes, *n)
			}
		}
	}
	return pods, nodes
}
