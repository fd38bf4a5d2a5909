package validate

import (
	"maps"
	"slices"
	"strings"

	networking "istio.io/api/networking/v1alpha3"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// ServiceEntry checks a ServiceEntry spec, including that its resolution,
// hosts and endpoints fit together. Paths start at "spec".
func ServiceEntry(se *networking.ServiceEntry) ErrorList {
	var e errs
	spec := field.NewPath("spec")
	if len(se.GetHosts()) == 0 {
		e.add(spec.Child("hosts"), "required (at least one host)")
	}
	seenHost := map[string]bool{}
	for i, h := range se.GetHosts() {
		p := spec.Child("hosts").Index(i)
		switch msg := checkWildcardHost(h); {
		case h == "*":
			e.add(p, "wildcard host \"*\" is not allowed")
		case msg != "":
			e.add(p, "%q: %s", h, msg)
		}
		if seenHost[h] {
			e.add(p, "duplicate host %q", h)
		}
		seenHost[h] = true
	}
	for i, a := range se.GetAddresses() {
		if !isIPOrCIDR(a) {
			e.add(spec.Child("addresses").Index(i), "%q is not an IP address or CIDR", a)
		}
	}
	portNames := checkServicePorts(&e, spec.Child("ports"), se.GetPorts())

	endpoints := se.GetEndpoints()
	if se.GetWorkloadSelector() != nil {
		if len(endpoints) > 0 {
			e.add(spec.Child("workloadSelector"), "cannot be combined with endpoints")
		}
		checkLabels(&e, spec.Child("workloadSelector", "labels"), se.GetWorkloadSelector().GetLabels())
	}
	res := se.GetResolution()
	resPath := spec.Child("resolution")
	switch res {
	case networking.ServiceEntry_NONE:
		if len(endpoints) > 0 {
			e.add(spec.Child("endpoints"), "must be empty with resolution NONE (traffic goes to the address the client dialled)")
		}
	case networking.ServiceEntry_STATIC:
		if len(endpoints) == 0 && se.GetWorkloadSelector() == nil {
			e.add(spec.Child("endpoints"), "required with resolution STATIC (or a workloadSelector)")
		}
	case networking.ServiceEntry_DNS, networking.ServiceEntry_DNS_ROUND_ROBIN:
		if len(endpoints) == 0 {
			for i, h := range se.GetHosts() {
				if strings.HasPrefix(h, "*") {
					e.add(spec.Child("hosts").Index(i), "wildcard host %q cannot be resolved with resolution %s and no endpoints", h, res)
				}
			}
		}
		if res == networking.ServiceEntry_DNS_ROUND_ROBIN && len(endpoints) > 1 {
			e.add(spec.Child("endpoints"), "at most one endpoint with resolution DNS_ROUND_ROBIN, got %d", len(endpoints))
		}
	case networking.ServiceEntry_DYNAMIC_DNS:
	default:
		e.add(resPath, "unknown resolution %d", int32(res))
	}
	for i, ep := range endpoints {
		checkEndpoint(&e, spec.Child("endpoints").Index(i), ep, res, portNames)
	}
	checkExportTo(&e, spec.Child("exportTo"), se.GetExportTo())
	for i, san := range se.GetSubjectAltNames() {
		if san == "" {
			e.add(spec.Child("subjectAltNames").Index(i), "must not be empty")
		}
	}
	return e.list
}

// checkServicePorts checks ports and returns their names.
func checkServicePorts(e *errs, p *field.Path, ports []*networking.ServicePort) map[string]bool {
	names := map[string]bool{}
	numbers := map[uint32]bool{}
	for i, port := range ports {
		pp := p.Index(i)
		checkPort(e, pp.Child("number"), port.GetNumber())
		if numbers[port.GetNumber()] {
			e.add(pp.Child("number"), "duplicate port %d", port.GetNumber())
		}
		numbers[port.GetNumber()] = true
		switch name := port.GetName(); {
		case name == "":
			e.required(pp.Child("name"))
		case names[name]:
			e.add(pp.Child("name"), "duplicate port name %q", name)
		}
		names[port.GetName()] = true
		checkProtocol(e, pp.Child("protocol"), port.GetProtocol())
		if tp := port.GetTargetPort(); tp > 65535 {
			e.add(pp.Child("targetPort"), "must be between 1 and 65535, got %d", tp)
		}
	}
	return names
}

func checkEndpoint(e *errs, p *field.Path, ep *networking.WorkloadEntry, res networking.ServiceEntry_Resolution, portNames map[string]bool) {
	addr := ep.GetAddress()
	ap := p.Child("address")
	unix := strings.HasPrefix(addr, "unix://")
	switch {
	case addr == "":
		if ep.GetNetwork() == "" {
			e.add(ap, "required (unless network is set: the endpoint is reached through that network's gateway)")
		}
	case unix:
		if len(addr) == len("unix://") {
			e.add(ap, "unix domain socket path is empty")
		}
		if len(ep.GetPorts()) > 0 {
			e.add(p.Child("ports"), "must be empty for a unix domain socket")
		}
	case res == networking.ServiceEntry_STATIC:
		if !isIP(addr) {
			e.add(ap, "%q must be an IP address or unix:// path with resolution STATIC", addr)
		}
	default:
		if msg := checkFQDN(addr); msg != "" && !isIP(addr) {
			e.add(ap, "%q is neither an IP address nor a host name: %s", addr, msg)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(ep.GetPorts())) {
		if !portNames[name] {
			e.add(p.Child("ports").Key(name), "no port named %q in spec.ports", name)
		}
		checkPort(e, p.Child("ports").Key(name), ep.GetPorts()[name])
	}
	checkLabels(e, p.Child("labels"), ep.GetLabels())
}
