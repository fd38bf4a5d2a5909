package xdsgen

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/meshfed/meshfed/pkg/model"
)

// ErrMalformedName is wrapped by the errors of ParseClusterName and
// ParseListenerName.
var ErrMalformedName = errors.New("xdsgen: malformed resource name")

// clusterNamePrefix starts every cluster name; meshfed only generates the
// outbound direction, like Istio's "outbound|<port>|<subset>|<fqdn>".
const clusterNamePrefix = "outbound|"

// ProxyGroup identifies the proxies that receive identical endpoint
// assignments: those in the same cluster and locality. The hub generates (and
// marshals) load assignments once per group.
//
// Only a DestinationRule's localityLbSetting.distribute looks at Zone and
// SubZone (see proximity); every other rule ranks endpoints by Cluster and
// Region alone, so groups that differ only in zone get proto.Equal
// assignments from such rules, and Cache builds those once for all of them.
type ProxyGroup struct {
	// Cluster is the proxy's cluster, its CLUSTER_ID node metadata.
	Cluster model.ClusterID
	// Region is the proxy's locality region; empty when unknown.
	Region string
	// Zone is the proxy's locality zone; empty when unknown.
	Zone string
	// SubZone is the proxy's locality sub-zone; empty when unknown.
	SubZone string
	// Network is the proxies' network (their NETWORK node metadata, else
	// their cluster's); empty when unknown. Endpoints on another known
	// network are reached through its gateways (see LoadAssignments).
	Network model.Network
	// EastWest: the proxies are routers on a known Network, which serve
	// other networks' clients when a Gateway with an AUTO_PASSTHROUGH
	// server selects them. Their assignments also hold, for every
	// cluster, the one of its SNI name (SNIClusterName) with the endpoints
	// of Network only.
	EastWest bool
}

// String returns "<cluster>/<region>", e.g. "cluster-1/us-east", followed
// by "/<zone>" when the group has a zone or sub-zone and "/<subzone>" when
// it has a sub-zone, e.g. "cluster-1/us-east/us-east-1a", then
// "@<network>" when the network is known and "+eastwest" for east-west
// routers. It is pure.
func (g ProxyGroup) String() string {
	s := string(g.Cluster) + "/" + g.Region
	if g.Zone != "" || g.SubZone != "" {
		s += "/" + g.Zone
	}
	if g.SubZone != "" {
		s += "/" + g.SubZone
	}
	if g.Network != "" {
		s += "@" + string(g.Network)
	}
	if g.EastWest {
		s += "+eastwest"
	}
	return s
}

// coarse returns g without its zone and sub-zone: the group whose
// assignments g shares under every rule that does not distribute.
func (g ProxyGroup) coarse() ProxyGroup {
	return ProxyGroup{Cluster: g.Cluster, Region: g.Region, Network: g.Network, EastWest: g.EastWest}
}

// locality returns the proxies' locality.
func (g ProxyGroup) locality() model.Locality {
	return model.Locality{Region: g.Region, Zone: g.Zone, SubZone: g.SubZone}
}

// ClusterName returns the CDS (and EDS) resource name of port of service h,
// "outbound|<port>||<hostname>": the cluster of all of the service's
// endpoints. It is SubsetClusterName(h, port, ""). It is pure.
func ClusterName(h model.Hostname, port uint32) string {
	return SubsetClusterName(h, port, "")
}

// SubsetClusterName returns the CDS (and EDS) resource name of subset of
// port of service h, "outbound|<port>|<subset>|<hostname>", Istio's form; an
// empty subset names the whole service (ClusterName). Subset names are
// DNS-1123 labels (validate.DestinationRule), so they never contain the '|'
// separator. It is pure.
func SubsetClusterName(h model.Hostname, port uint32, subset string) string {
	return clusterNamePrefix + strconv.FormatUint(uint64(port), 10) + "|" + subset + "|" + string(h)
}

// ListenerName returns the LDS resource name of port of service h,
// "<hostname>:<port>": the name grpc-go subscribes to when a client dials
// xds:///<hostname>:<port>. It is pure.
func ListenerName(h model.Hostname, port uint32) string {
	return string(h) + ":" + strconv.FormatUint(uint64(port), 10)
}

// RouteName returns the RDS resource name of port of service h. It is the same
// string as ListenerName, so one parser serves both. It is pure.
func RouteName(h model.Hostname, port uint32) string { return ListenerName(h, port) }

// ParseClusterName is the inverse of ClusterName. It accepts only names that
// ClusterName produces for a valid DNS hostname and a port in 1..65535 written
// without leading zeros, so that ClusterName(ParseClusterName(s)) == s; a
// subset cluster's name is rejected (ParseSubsetClusterName accepts both).
// Errors wrap ErrMalformedName. It is pure.
func ParseClusterName(name string) (model.Hostname, uint32, error) {
	h, port, subset, err := ParseSubsetClusterName(name)
	if err != nil {
		return "", 0, err
	}
	if subset != "" {
		return "", 0, malformed(name, "subset %q: want \"outbound|<port>||<hostname>\"", subset)
	}
	return h, port, nil
}

// ParseSubsetClusterName is the inverse of SubsetClusterName, with the
// strictness of ParseClusterName; the subset, when not empty, must be a
// DNS-1123 label. The subset is "" for a service's default cluster. Errors
// wrap ErrMalformedName. It is pure.
func ParseSubsetClusterName(name string) (h model.Hostname, port uint32, subset string, err error) {
	rest, ok := strings.CutPrefix(name, clusterNamePrefix)
	if !ok {
		return "", 0, "", malformed(name, "want prefix %q", clusterNamePrefix)
	}
	parts := strings.SplitN(rest, "|", 3)
	if len(parts) != 3 {
		return "", 0, "", malformed(name, `want "outbound|<port>|<subset>|<hostname>"`)
	}
	port, err = parsePort(parts[0])
	if err != nil {
		return "", 0, "", malformed(name, "%v", err)
	}
	if parts[1] != "" {
		if err := checkLabel(parts[1]); err != nil {
			return "", 0, "", malformed(name, "subset: %v", err)
		}
	}
	if err := checkHostname(parts[2]); err != nil {
		return "", 0, "", malformed(name, "%v", err)
	}
	return model.Hostname(parts[2]), port, parts[1], nil
}

// ParseListenerName is the inverse of ListenerName (and RouteName), with the
// same strictness as ParseClusterName. Errors wrap ErrMalformedName. It is
// pure.
func ParseListenerName(name string) (model.Hostname, uint32, error) {
	i := strings.LastIndexByte(name, ':')
	if i < 0 {
		return "", 0, malformed(name, `want "<hostname>:<port>"`)
	}
	port, err := parsePort(name[i+1:])
	if err != nil {
		return "", 0, malformed(name, "%v", err)
	}
	if err := checkHostname(name[:i]); err != nil {
		return "", 0, malformed(name, "%v", err)
	}
	return model.Hostname(name[:i]), port, nil
}

func malformed(name, format string, args ...any) error {
	return fmt.Errorf("%w %q: %s", ErrMalformedName, name, fmt.Sprintf(format, args...))
}

// parsePort parses a canonical decimal port: 1..65535, no sign, no leading
// zero.
func parsePort(s string) (uint32, error) {
	if s == "" || len(s) > 5 || s[0] == '0' {
		return 0, fmt.Errorf("bad port %q", s)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, fmt.Errorf("bad port %q", s)
		}
	}
	p, _ := strconv.Atoi(s) // at most 5 digits: cannot overflow
	if !validPort(uint32(p)) {
		return 0, fmt.Errorf("port %d out of range", p)
	}
	return uint32(p), nil
}

// validPort reports whether p can be dialled.
func validPort(p uint32) bool { return p >= 1 && p <= 65535 }

// checkHostname accepts a lowercase DNS name: dot-separated labels of 1 to 63
// characters from [a-z0-9-] that neither start nor end with '-', at most 253
// characters in all. Kubernetes service hostnames are of this form.
func checkHostname(h string) error {
	if h == "" {
		return errors.New("empty hostname")
	}
	if len(h) > 253 {
		return fmt.Errorf("hostname longer than 253 characters")
	}
	for label := range strings.SplitSeq(h, ".") {
		if err := checkLabel(label); err != nil {
			return fmt.Errorf("hostname %q: %w", h, err)
		}
	}
	return nil
}

// checkLabel accepts a DNS-1123 label: 1 to 63 characters from [a-z0-9-]
// that neither start nor end with '-'.
func checkLabel(label string) error {
	if label == "" || len(label) > 63 {
		return fmt.Errorf("bad label %q", label)
	}
	if label[0] == '-' || label[len(label)-1] == '-' {
		return fmt.Errorf("label %q starts or ends with '-'", label)
	}
	for i := 0; i < len(label); i++ {
		c := label[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
			return fmt.Errorf("bad character %q in label %q", c, label)
		}
	}
	return nil
}
