package csds

import (
	"errors"
	"fmt"
	"slices"
	"time"

	adminv3 "github.com/envoyproxy/go-control-plane/envoy/admin/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	statusv3 "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/meshfed/meshfed/pkg/proxystatus"
	"github.com/meshfed/meshfed/pkg/xdsnode"
)

// Node metadata keys of a ClientConfig (see the package doc).
const (
	MetadataClusterID  = xdsnode.MetadataClusterID
	MetadataReplica    = "MESHFED_REPLICA"
	MetadataHubVersion = "MESHFED_HUB_VERSION"
	MetadataConnected  = "MESHFED_CONNECTED"
	MetadataLastChange = "MESHFED_LAST_CHANGE"
	MetadataXDS        = "MESHFED_XDS"
	// MetadataIdentity is the identity the proxy's stream proved
	// (proxystatus.Record.Identity).
	MetadataIdentity = "MESHFED_IDENTITY"
)

// Keys of a type's entry in MESHFED_XDS.
const (
	xdsSent       = "sent"
	xdsSentNonce  = "sentNonce"
	xdsAckedNonce = "ackedNonce"
	xdsSentAt     = "sentAt"
)

// ErrInvalidConfig is returned for a ClientConfig that cannot be a record.
var ErrInvalidConfig = errors.New("csds: invalid client config")

// ConfigStatus maps a proxystatus.Status to CSDS.
func ConfigStatus(s proxystatus.Status) statusv3.ConfigStatus {
	switch s {
	case proxystatus.StatusSynced:
		return statusv3.ConfigStatus_SYNCED
	case proxystatus.StatusNotSent:
		return statusv3.ConfigStatus_NOT_SENT
	case proxystatus.StatusStale:
		return statusv3.ConfigStatus_STALE
	case proxystatus.StatusError:
		return statusv3.ConfigStatus_ERROR
	}
	return statusv3.ConfigStatus_UNKNOWN
}

// Status maps a CSDS ConfigStatus to a proxystatus.Status; "" for UNKNOWN.
func Status(s statusv3.ConfigStatus) proxystatus.Status {
	switch s {
	case statusv3.ConfigStatus_SYNCED:
		return proxystatus.StatusSynced
	case statusv3.ConfigStatus_NOT_SENT:
		return proxystatus.StatusNotSent
	case statusv3.ConfigStatus_STALE:
		return proxystatus.StatusStale
	case statusv3.ConfigStatus_ERROR:
		return proxystatus.StatusError
	}
	return ""
}

func formatTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// ClientConfig returns r as CSDS reports it.
func ClientConfig(r proxystatus.Record) *statusv3.ClientConfig {
	md := map[string]*structpb.Value{}
	setString := func(m map[string]*structpb.Value, k, v string) {
		if v != "" {
			m[k] = structpb.NewStringValue(v)
		}
	}
	setTime := func(m map[string]*structpb.Value, k string, t time.Time) {
		if !t.IsZero() {
			m[k] = structpb.NewStringValue(formatTime(t))
		}
	}
	setString(md, MetadataClusterID, r.Cluster)
	setString(md, MetadataReplica, r.Replica)
	setString(md, MetadataHubVersion, r.HubVersion)
	setString(md, MetadataIdentity, r.Identity)
	setTime(md, MetadataConnected, r.Connected)
	setTime(md, MetadataLastChange, r.LastChange)

	node := &corev3.Node{Id: r.Proxy, Metadata: &structpb.Struct{Fields: md}}
	if r.Version != "" {
		node.UserAgentVersionType = &corev3.Node_UserAgentVersion{UserAgentVersion: r.Version}
	}
	cc := &statusv3.ClientConfig{Node: node}
	xds := map[string]*structpb.Value{}
	for _, k := range typesOf(r) {
		ts, ok := r.Types[k]
		g := &statusv3.ClientConfig_GenericXdsConfig{TypeUrl: proxystatus.TypeURL(k)}
		cc.GenericXdsConfigs = append(cc.GenericXdsConfigs, g)
		if !ok {
			g.ConfigStatus = statusv3.ConfigStatus_NOT_SENT
			continue
		}
		if ts.TypeURL != "" {
			g.TypeUrl = ts.TypeURL
		}
		st := ts.Status
		if st == "" {
			st = ts.Compute()
		}
		g.ConfigStatus = ConfigStatus(st)
		g.VersionInfo = ts.Acked
		if !ts.AckedAt.IsZero() {
			g.LastUpdated = timestamppb.New(ts.AckedAt)
		}
		switch {
		case ts.Nack != "":
			g.ClientStatus = adminv3.ClientResourceStatus_NACKED
			g.ErrorState = &adminv3.UpdateFailureState{Details: ts.Nack, VersionInfo: ts.NackVersion}
		case ts.AckedNonce != "":
			g.ClientStatus = adminv3.ClientResourceStatus_ACKED
		default:
			g.ClientStatus = adminv3.ClientResourceStatus_REQUESTED
		}
		extra := map[string]*structpb.Value{}
		setString(extra, xdsSent, ts.Sent)
		setString(extra, xdsSentNonce, ts.SentNonce)
		setString(extra, xdsAckedNonce, ts.AckedNonce)
		setTime(extra, xdsSentAt, ts.SentAt)
		if len(extra) > 0 {
			xds[k] = structpb.NewStructValue(&structpb.Struct{Fields: extra})
		}
	}
	if len(xds) > 0 {
		md[MetadataXDS] = structpb.NewStructValue(&structpb.Struct{Fields: xds})
	}
	return cc
}

// typesOf returns the short types of r's GenericXdsConfigs: the table's,
// then every other subscribed type, sorted.
func typesOf(r proxystatus.Record) []string {
	out := proxystatus.TableTypes()
	var extra []string
	for k := range r.Types {
		if !slices.Contains(out, k) {
			extra = append(extra, k)
		}
	}
	slices.Sort(extra)
	return append(out, extra...)
}

// Record is the inverse of ClientConfig. It also reads a ClientConfig from
// another CSDS server as well as the standard fields allow.
func Record(cc *statusv3.ClientConfig) (proxystatus.Record, error) {
	node := cc.GetNode()
	if node.GetId() == "" {
		return proxystatus.Record{}, fmt.Errorf("%w: no node ID", ErrInvalidConfig)
	}
	md := node.GetMetadata().GetFields()
	r := proxystatus.Record{
		Proxy:      node.GetId(),
		Name:       xdsnode.NameOf(node.GetId()),
		Cluster:    md[MetadataClusterID].GetStringValue(),
		Replica:    md[MetadataReplica].GetStringValue(),
		HubVersion: md[MetadataHubVersion].GetStringValue(),
		Identity:   md[MetadataIdentity].GetStringValue(),
		Version:    node.GetUserAgentVersion(),
	}
	var err error
	if r.Connected, err = parseTime(md, MetadataConnected); err != nil {
		return proxystatus.Record{}, fmt.Errorf("%w: node %s: %w", ErrInvalidConfig, r.Proxy, err)
	}
	if r.LastChange, err = parseTime(md, MetadataLastChange); err != nil {
		return proxystatus.Record{}, fmt.Errorf("%w: node %s: %w", ErrInvalidConfig, r.Proxy, err)
	}
	xds := md[MetadataXDS].GetStructValue().GetFields()
	for _, g := range cc.GetGenericXdsConfigs() {
		if g.GetConfigStatus() == statusv3.ConfigStatus_NOT_SENT &&
			g.GetClientStatus() == adminv3.ClientResourceStatus_UNKNOWN {
			continue // never subscribed
		}
		short := proxystatus.ShortType(g.GetTypeUrl())
		ts := proxystatus.TypeStatus{
			TypeURL: g.GetTypeUrl(),
			Acked:   g.GetVersionInfo(),
			Nack:    g.GetErrorState().GetDetails(),
			Status:  Status(g.GetConfigStatus()),
		}
		if g.GetErrorState() != nil {
			ts.NackVersion = g.GetErrorState().GetVersionInfo()
		}
		if g.GetLastUpdated() != nil {
			ts.AckedAt = g.GetLastUpdated().AsTime()
		}
		extra := xds[short].GetStructValue().GetFields()
		ts.Sent = extra[xdsSent].GetStringValue()
		ts.SentNonce = extra[xdsSentNonce].GetStringValue()
		ts.AckedNonce = extra[xdsAckedNonce].GetStringValue()
		if ts.SentAt, err = parseTime(extra, xdsSentAt); err != nil {
			return proxystatus.Record{}, fmt.Errorf("%w: node %s type %s: %w", ErrInvalidConfig, r.Proxy, short, err)
		}
		if ts.Status == "" {
			ts.Status = ts.Compute()
		}
		if r.Types == nil {
			r.Types = map[string]proxystatus.TypeStatus{}
		}
		r.Types[short] = ts
	}
	return r, nil
}

func parseTime(m map[string]*structpb.Value, k string) (time.Time, error) {
	v := m[k].GetStringValue()
	if v == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, fmt.Errorf("%s: %w", k, err)
	}
	return t, nil
}

// Response answers req from recs: one ClientConfig for every record whose
// node matches one of req's node matchers (every record if there are none).
// It returns ErrInvalidMatcher for a matcher it cannot evaluate.
func Response(req *statusv3.ClientStatusRequest, recs []proxystatus.Record) (*statusv3.ClientStatusResponse, error) {
	m, err := NewMatcher(req.GetNodeMatchers())
	if err != nil {
		return nil, err
	}
	out := &statusv3.ClientStatusResponse{}
	for _, r := range recs {
		cc := ClientConfig(r)
		if m.Match(cc.GetNode()) {
			out.Config = append(out.Config, cc)
		}
	}
	return out, nil
}
