package istioconfig

import (
	"cmp"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshfed/meshfed/pkg/model"
)

// ServiceEntry is a valid ServiceEntry: hosts it adds to the mesh, with
// their ports and endpoints.
type ServiceEntry struct {
	Meta
	Spec *networking.ServiceEntry
}

func (e *ServiceEntry) meta() Meta { return e.Meta }

// entryIndex holds a Snapshot's ServiceEntries by host (the oldest naming
// a host wins it) and the service each host becomes.
type entryIndex struct {
	byHost   map[model.Hostname]*ServiceEntry
	services map[model.Hostname]*model.MergedService
}

// claimEntry gives host h to e unless an older entry holds it.
func (x *entryIndex) claim(h model.Hostname, e *ServiceEntry) {
	if x.byHost == nil {
		x.byHost = map[model.Hostname]*ServiceEntry{}
	}
	if cur, ok := x.byHost[h]; !ok || e.older(cur.Meta) {
		x.byHost[h] = e
	}
}

// build converts every host's winning entry.
func (x *entryIndex) build() {
	if len(x.byHost) == 0 {
		return
	}
	x.services = make(map[model.Hostname]*model.MergedService, len(x.byHost))
	for h, e := range x.byHost {
		if ms := EntryService(h, e); ms != nil {
			x.services[h] = ms
		}
	}
}

// entryHosts returns the hosts of se that become services: its exact
// hosts, lower-cased; wildcard hosts are not (see EntryNotes).
func entryHosts(se *ServiceEntry) []model.Hostname {
	var out []model.Hostname
	for _, h := range se.Spec.GetHosts() {
		if !strings.HasPrefix(h, "*") {
			out = append(out, model.Hostname(strings.ToLower(h)))
		}
	}
	return out
}

// EntryService converts the ServiceEntry e into the service of its host
// h: e's ports (by number), resolution, and endpoints (by address for
// STATIC, by name for DNS; a DNS entry without endpoints resolves h
// itself). It returns nil when proxies get nothing of h: resolution NONE
// (traffic to the address the client dialled, which a proxy of the hub
// does not pass through) or a workloadSelector (WorkloadEntries are not
// read), see EntryNotes.
func EntryService(h model.Hostname, e *ServiceEntry) *model.MergedService {
	spec := e.Spec
	svc := &model.Service{Hostname: h, Name: string(h), Namespace: e.Namespace,
		External: spec.GetLocation() == networking.ServiceEntry_MESH_EXTERNAL}
	for _, p := range spec.GetPorts() {
		svc.Ports = append(svc.Ports, model.ServicePort{Name: p.GetName(), Port: p.GetNumber(), Protocol: PortProtocol(p.GetProtocol())})
	}
	slices.SortFunc(svc.Ports, func(a, b model.ServicePort) int { return cmp.Compare(a.Port, b.Port) })
	if spec.GetWorkloadSelector() != nil {
		return nil
	}
	ms := &model.MergedService{Service: svc}
	switch spec.GetResolution() {
	case networking.ServiceEntry_STATIC:
		for _, we := range spec.GetEndpoints() {
			addr, err := netip.ParseAddr(we.GetAddress())
			if err != nil {
				continue // a Unix socket or a name: not an address a proxy can be sent (EntryNotes)
			}
			ms.Endpoints = append(ms.Endpoints, model.Endpoint{
				Address: addr.Unmap(), Ready: true, Locality: model.ParseLocality(we.GetLocality()),
				ServiceAccount: we.GetServiceAccount(), Labels: model.NewLabels(we.GetLabels()),
				Ports: entryPorts(spec, we),
			})
		}
		model.SortEndpoints(ms.Endpoints)
	case networking.ServiceEntry_DNS, networking.ServiceEntry_DNS_ROUND_ROBIN:
		svc.Resolution = model.ResolutionDNS
		if spec.GetResolution() == networking.ServiceEntry_DNS_ROUND_ROBIN {
			svc.Resolution = model.ResolutionDNSRoundRobin
		}
		for _, we := range spec.GetEndpoints() {
			svc.DNSEndpoints = append(svc.DNSEndpoints, model.DNSEndpoint{
				Host: we.GetAddress(), Ports: entryPorts(spec, we), Locality: model.ParseLocality(we.GetLocality()), Weight: we.GetWeight(),
			})
		}
		if len(svc.DNSEndpoints) == 0 {
			svc.DNSEndpoints = []model.DNSEndpoint{{Host: string(h), Ports: entryPorts(spec, nil)}}
		}
	default:
		return nil
	}
	return ms
}

// entryPorts maps each port name of spec to the port we serves it on: we's
// own ports entry, else the port's targetPort, else its number.
func entryPorts(spec *networking.ServiceEntry, we *networking.WorkloadEntry) map[string]uint32 {
	out := make(map[string]uint32, len(spec.GetPorts()))
	for _, p := range spec.GetPorts() {
		switch {
		case we.GetPorts()[p.GetName()] != 0:
			out[p.GetName()] = we.GetPorts()[p.GetName()]
		case p.GetTargetPort() != 0:
			out[p.GetName()] = p.GetTargetPort()
		default:
			out[p.GetName()] = p.GetNumber()
		}
	}
	return out
}

// PortProtocol maps the protocol of an Istio port (a ServiceEntry's, a
// Sidecar listener's) to the model's: gRPC, HTTP and HTTP/2 as such,
// anything else (HTTPS, TLS, TCP, MONGO, …) TCP. It is pure.
func PortProtocol(p string) model.Protocol {
	switch strings.ToUpper(p) {
	case "GRPC":
		return model.ProtocolGRPC
	case "HTTP":
		return model.ProtocolHTTP
	case "HTTP2":
		return model.ProtocolHTTP2
	}
	return model.ProtocolTCP
}

// EntryHosts returns the hosts the ServiceEntries make services of, sorted.
func (s *Snapshot) EntryHosts() []model.Hostname {
	if s == nil {
		return nil
	}
	return slices.Sorted(maps.Keys(s.entries.services))
}

// Entry returns the service the ServiceEntries make of host h, nil when
// none does. The result is shared and must not be modified.
func (s *Snapshot) Entry(h model.Hostname) *model.MergedService {
	if s == nil {
		return nil
	}
	return s.entries.services[h]
}

// EntriesChanged returns the hosts whose winning ServiceEntry differs
// between old and next, sorted; either may be nil.
func EntriesChanged(old, next *Snapshot) []model.Hostname {
	var out []model.Hostname
	seen := map[model.Hostname]bool{}
	for _, s := range []*Snapshot{old, next} {
		if s == nil {
			continue
		}
		for h := range s.entries.byHost {
			if seen[h] {
				continue
			}
			seen[h] = true
			if old.entry(h) != next.entry(h) {
				out = append(out, h)
			}
		}
	}
	slices.Sort(out)
	return out
}

func (s *Snapshot) entry(h model.Hostname) *ServiceEntry {
	if s == nil {
		return nil
	}
	return s.entries.byHost[h]
}

// MergeEntry returns the service of a host that both the registry (base,
// Kubernetes Services) and a ServiceEntry (entry) declare, as Istio merges
// a MESH_INTERNAL entry with the Service of its host: the Service's
// definition, with the entry's ports it lacks, and the endpoints of both.
// Either may be nil. A DNS entry adds nothing to a Service: proxies send
// to the Service's endpoints by address.
func MergeEntry(base, entry *model.MergedService) *model.MergedService {
	switch {
	case entry == nil:
		return base
	case base == nil:
		return entry
	}
	out := &model.MergedService{Service: base.Service, Clusters: base.Clusters}
	var extra []model.ServicePort
	for _, p := range entry.Service.Ports {
		if _, ok := base.Service.Port(p.Port); !ok {
			extra = append(extra, p)
		}
	}
	if len(extra) > 0 {
		svc := *base.Service
		svc.Ports = append(slices.Clone(base.Service.Ports), extra...)
		slices.SortFunc(svc.Ports, func(a, b model.ServicePort) int { return cmp.Compare(a.Port, b.Port) })
		out.Service = &svc
	}
	out.Endpoints = append(slices.Clone(base.Endpoints), entry.Endpoints...)
	model.SortEndpoints(out.Endpoints)
	return out
}

// EntryNotes says what of a ServiceEntry proxies do not get, and why.
func EntryNotes(e *ServiceEntry) []string {
	var out []string
	spec := e.Spec
	for i, h := range spec.GetHosts() {
		if strings.HasPrefix(h, "*") {
			out = append(out, fmt.Sprintf("hosts[%d]: wildcard host %q is not a service proxies can be sent (all kinds)", i, h))
		}
	}
	switch {
	case spec.GetWorkloadSelector() != nil:
		out = append(out, "workloadSelector: WorkloadEntries and Pods selected by a ServiceEntry are not read; the hosts get no endpoints (all kinds)")
	case spec.GetResolution() == networking.ServiceEntry_NONE:
		out = append(out, "resolution: NONE (pass-through to the dialled address) is not generated; the hosts get nothing (all kinds)")
	case spec.GetResolution() == networking.ServiceEntry_DYNAMIC_DNS:
		out = append(out, "resolution: DYNAMIC_DNS is not generated; the hosts get nothing (all kinds)")
	case spec.GetResolution() == networking.ServiceEntry_STATIC:
		for i, we := range spec.GetEndpoints() {
			if _, err := netip.ParseAddr(we.GetAddress()); err != nil {
				out = append(out, fmt.Sprintf("endpoints[%d].address: %q is not an IP address; left out (all kinds)", i, we.GetAddress()))
			}
		}
	}
	if len(spec.GetExportTo()) > 0 {
		out = append(out, "exportTo: not applied; the hosts are visible to every namespace (all kinds)")
	}
	return out
}
