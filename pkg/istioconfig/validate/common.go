package validate

import (
	"fmt"
	"maps"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	networking "istio.io/api/networking/v1alpha3"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// dnsLabel is one label of a host name. Istio accepts upper case, as DNS
// does; Kubernetes object names are stricter (checked where they apply).
var dnsLabel = regexp.MustCompile(`^[a-zA-Z0-9]([-a-zA-Z0-9]*[a-zA-Z0-9])?$`)

// checkFQDN reports why name is not a host name, or "".
func checkFQDN(name string) string {
	if len(name) > 255 {
		return "longer than 255 characters"
	}
	for _, l := range strings.Split(name, ".") {
		if l == "" {
			return "has an empty label"
		}
		if len(l) > 63 {
			return fmt.Sprintf("label %q is longer than 63 characters", l)
		}
		if !dnsLabel.MatchString(l) {
			return fmt.Sprintf("label %q is not a DNS label (letters, digits, '-')", l)
		}
	}
	return ""
}

// checkWildcardHost reports why host is neither a host name nor a wildcard
// ("*" or "*.suffix"), or "".
func checkWildcardHost(host string) string {
	switch {
	case host == "":
		return "required"
	case host == "*":
		return ""
	case strings.HasPrefix(host, "*."):
		return checkFQDN(host[2:])
	case strings.Contains(host, "*"):
		return "a wildcard is allowed only as the leftmost label (\"*.example.com\")"
	}
	return checkFQDN(host)
}

func isIP(s string) bool {
	_, err := netip.ParseAddr(s)
	return err == nil
}

func isIPOrCIDR(s string) bool {
	if isIP(s) {
		return true
	}
	_, err := netip.ParsePrefix(s)
	return err == nil
}

func checkPort(e *errs, p *field.Path, n uint32) {
	if n < 1 || n > 65535 {
		e.add(p, "must be between 1 and 65535, got %d", n)
	}
}

// checkPortSelector checks an optional destination port.
func checkPortSelector(e *errs, p *field.Path, ps *networking.PortSelector) {
	if ps != nil {
		checkPort(e, p.Child("number"), ps.GetNumber())
	}
}

// checkDuration checks an optional duration: well-formed and at least 1 ms,
// Envoy's resolution.
func checkDuration(e *errs, p *field.Path, d *durationpb.Duration) {
	if d == nil {
		return
	}
	if err := d.CheckValid(); err != nil {
		e.add(p, "invalid duration: %v", err)
		return
	}
	if d.AsDuration() < time.Millisecond {
		e.add(p, "must be at least 1ms, got %s", d.AsDuration())
	}
}

func checkPercent(e *errs, p *field.Path, pct *networking.Percent) {
	if pct != nil && (pct.GetValue() < 0 || pct.GetValue() > 100) {
		e.add(p.Child("value"), "must be between 0 and 100, got %v", pct.GetValue())
	}
}

// checkLabels checks a label selector map with Kubernetes' rules.
func checkLabels(e *errs, p *field.Path, labels map[string]string) {
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		v := labels[k]
		for _, msg := range validation.IsQualifiedName(k) {
			e.add(p.Key(k), "invalid label key: %s", msg)
		}
		for _, msg := range validation.IsValidLabelValue(v) {
			e.add(p.Key(k), "invalid label value %q: %s", v, msg)
		}
	}
}

// checkExportTo checks the namespaces a resource is visible in: "." (its
// own), "*" (all) or namespace names, without repeats.
func checkExportTo(e *errs, p *field.Path, exportTo []string) {
	seen := map[string]bool{}
	for i, ns := range exportTo {
		switch {
		case ns == "." || ns == "*":
		case len(validation.IsDNS1123Label(ns)) != 0:
			e.add(p.Index(i), "%q must be \".\", \"*\" or a namespace name", ns)
		}
		if seen[ns] {
			e.add(p.Index(i), "duplicate %q", ns)
		}
		seen[ns] = true
	}
	if seen["*"] && len(exportTo) > 1 {
		e.add(p, "\"*\" cannot be combined with other namespaces")
	}
}

// checkGatewayName checks a gateway reference: "mesh", "<name>" or
// "<namespace>/<name>".
func checkGatewayName(e *errs, p *field.Path, gw string) {
	if gw == "mesh" {
		return
	}
	ns, name, scoped := strings.Cut(gw, "/")
	if !scoped {
		ns, name = "", gw
	}
	if scoped && len(validation.IsDNS1123Label(ns)) != 0 {
		e.add(p, "%q: namespace %q is not a namespace name", gw, ns)
	}
	if len(validation.IsDNS1123Subdomain(name)) != 0 {
		e.add(p, "%q must be \"mesh\", a gateway name or \"namespace/name\"", gw)
	}
}

// protocols are the port protocols Istio knows (compared case-insensitively).
var protocols = map[string]bool{
	"HTTP": true, "HTTPS": true, "GRPC": true, "GRPC-WEB": true, "HTTP2": true, "HTTP_PROXY": true,
	"MONGO": true, "MYSQL": true, "REDIS": true, "TCP": true, "TLS": true, "UDP": true, "THRIFT": true,
}

func checkProtocol(e *errs, p *field.Path, proto string) {
	if proto != "" && !protocols[strings.ToUpper(proto)] {
		e.add(p, "unknown protocol %q", proto)
	}
}
