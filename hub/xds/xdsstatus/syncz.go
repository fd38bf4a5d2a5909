package xdsstatus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	statusv3 "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/meshfed/meshfed/pkg/proxystatus"
	"github.com/meshfed/meshfed/pkg/proxystatus/csds"
	"github.com/meshfed/meshfed/pkg/version"
	"github.com/meshfed/meshfed/pkg/xdsnode"
)

// Istio's debug types on ADS, as istiod serves them and istioctl asks for
// them.
const (
	// DebugTypePrefix starts the type URL of every Istio debug type.
	DebugTypePrefix = "istio.io/debug"
	// DebugSynczType is what `istioctl proxy-status` asks for: one
	// envoy.service.status.v3.ClientConfig per proxy of the mesh.
	DebugSynczType = DebugTypePrefix + "/syncz"
)

// ErrDebugDelta is returned for a Delta watch of a debug type: istioctl
// asks over SotW, and a debug answer is a snapshot, not a resource set
// that changes.
var ErrDebugDelta = errors.New("xds: istio.io/debug types are served over SotW ADS only, not Delta")

// IsDebugType reports whether typeURL is one of Istio's debug types.
func IsDebugType(typeURL string) bool { return strings.HasPrefix(typeURL, DebugTypePrefix) }

// DebugTypes answers SotW watches of DebugSynczType with the proxy status
// of the whole fleet, read from a StatusSource when the request arrives.
// The groupCache hands it every watch of a debug type.
//
// A request that names no version (istioctl's only request, or a client
// asking again) is answered at once; an ACK or NACK of an earlier answer
// is not, since answering it would start an endless ACK-answer loop with a
// client that ACKs. Its methods may be called concurrently from any number
// of streams; they never block.
type DebugTypes struct {
	src          StatusSource         // set once, at construction
	controlPlane *corev3.ControlPlane // istiod's JSON; never written after construction
	versions     atomic.Uint64        // numbers the answers
}

func NewDebugTypes(src StatusSource, replica string) *DebugTypes {
	return &DebugTypes{src: src, controlPlane: controlPlaneOf(replica)}
}

var _ cachev3.ConfigWatcher = (*DebugTypes)(nil)

// ControlPlaneID is the ID in the control_plane.identifier of every
// replica's syncz answer. istioctl shows it in its ISTIOD column and keys
// the answers of several control planes by it: asked through port-forwards
// to every replica's Pod, it keeps one of the replicas' answers, each of
// which lists the whole fleet, instead of listing every proxy once per
// replica. The serving replica of each proxy is in its node metadata
// (MESHFED_REPLICA), the answering one in the identifier's Replica.
const ControlPlaneID = "meshfed-hub"

// controlPlaneInstance is the JSON of istiod's control_plane.identifier
// (IstioControlPlaneInstance in istio.io/istio/pilot/pkg/xds), plus the
// answering replica, which istioctl ignores.
type controlPlaneInstance struct {
	Component string
	ID        string
	Info      buildInfo
	Replica   string
}

// buildInfo is istio.io/istio/pkg/version.BuildInfo's JSON.
type buildInfo struct {
	Version       string `json:"version"`
	GitRevision   string `json:"revision"`
	GolangVersion string `json:"golang_version"`
	BuildStatus   string `json:"status"`
	GitTag        string `json:"tag"`
}

// controlPlaneOf returns the identifier of replica's answers, with the
// hub's build as its version.
func controlPlaneOf(replica string) *corev3.ControlPlane {
	v := version.Get()
	info := buildInfo{Version: v.Version, GitRevision: v.Revision, GolangVersion: v.GoVersion, GitTag: v.Version, BuildStatus: "Clean"}
	if strings.HasSuffix(v.Version, "-dirty") {
		info.BuildStatus = "Modified"
	}
	// Marshalling strings cannot fail.
	id, _ := json.Marshal(controlPlaneInstance{Component: "meshfed-hub", ID: ControlPlaneID, Info: info, Replica: replica})
	return &corev3.ControlPlane{Identifier: string(id)}
}

// CreateWatch answers req at once unless it acknowledges an earlier
// answer; the returned cancel function may be called any number of times.
func (d *DebugTypes) CreateWatch(req *cachev3.Request, _ cachev3.Subscription, out chan cachev3.Response) (func(), error) {
	if req.GetTypeUrl() != DebugSynczType {
		return nil, fmt.Errorf("xds: type %q is not served", req.GetTypeUrl())
	}
	if req.GetVersionInfo() != "" || req.GetErrorDetail() != nil {
		return func() {}, nil // an ACK or NACK: nothing to say
	}
	resp := &debugResponse{req: req, resp: d.syncz()}
	select {
	case out <- resp:
		return func() {}, nil
	default:
	}
	// The stream's response channel is full (its other types' answers
	// wait to be sent): hand the answer over without blocking the stream
	// goroutine that drains the channel, unless the watch is cancelled.
	done := make(chan struct{})
	go func() {
		select {
		case out <- resp:
		case <-done:
		}
	}()
	return sync.OnceFunc(func() { close(done) }), nil
}

// CreateDeltaWatch refuses: see ErrDebugDelta.
func (d *DebugTypes) CreateDeltaWatch(req *cachev3.DeltaRequest, _ cachev3.Subscription, _ chan cachev3.DeltaResponse) (func(), error) {
	return nil, fmt.Errorf("%w (type %q)", ErrDebugDelta, req.GetTypeUrl())
}

// syncz builds the answer to a syncz request from the fleet's records now.
func (d *DebugTypes) syncz() *discoveryv3.DiscoveryResponse {
	resp := &discoveryv3.DiscoveryResponse{
		TypeUrl:      DebugSynczType,
		VersionInfo:  strconv.FormatUint(d.versions.Add(1), 10),
		ControlPlane: d.controlPlane,
	}
	for _, cc := range synczConfigs(d.src.All()) {
		a, err := anypb.New(cc)
		if err != nil {
			continue // a ClientConfig always marshals
		}
		resp.Resources = append(resp.Resources, a)
	}
	return resp
}

// synczConfigs returns a ClientConfig per proxy of recs as istiod's syncz
// writes them, leaving out debug clients such as istioctl itself. It is
// pure.
func synczConfigs(recs []proxystatus.Record) []*statusv3.ClientConfig {
	out := make([]*statusv3.ClientConfig, 0, len(recs))
	for _, r := range recs {
		if isDebugClient(r) {
			continue
		}
		out = append(out, synczConfig(r))
	}
	return out
}

// isDebugClient reports whether r is a stream that asked only for debug
// types. istioctl's stream (node metadata GENERATOR=event) is one; the
// records of other replicas carry no node metadata, so what a stream
// subscribed to is what tells a debug client from a proxy fleet-wide.
func isDebugClient(r proxystatus.Record) bool {
	for short := range r.Types {
		if !IsDebugType(proxystatus.TypeURL(short)) {
			return false
		}
	}
	return len(r.Types) > 0
}

// synczConfig is CSDS's ClientConfig of r (package csds: meshfed's own
// metadata stays, for `istioctl proxy-status -o json`) reshaped as istiod
// answers syncz: the node ID is "<pod>.<ns>", the metadata also says
// NAMESPACE and ISTIO_VERSION, and generic_xds_configs lists only the
// types the proxy subscribed to (istioctl counts every listed type as
// subscribed), with last_updated when the proxy last ACKed, or else was
// last sent, the type.
func synczConfig(r proxystatus.Record) *statusv3.ClientConfig {
	cc := csds.ClientConfig(r)
	node := cc.GetNode()
	if r.Name != "" {
		node.Id = r.Name
	}
	md := node.GetMetadata().GetFields()
	if id, err := xdsnode.ParseID(r.Proxy); err == nil {
		md[xdsnode.MetadataNamespace] = structpb.NewStringValue(id.Namespace)
	}
	if r.Version != "" {
		md[xdsnode.MetadataIstioVersion] = structpb.NewStringValue(r.Version)
	}
	kept := cc.GenericXdsConfigs[:0]
	for _, g := range cc.GenericXdsConfigs {
		ts, ok := r.Types[proxystatus.ShortType(g.GetTypeUrl())]
		if !ok || IsDebugType(g.GetTypeUrl()) {
			continue
		}
		if g.LastUpdated == nil && !ts.SentAt.IsZero() {
			g.LastUpdated = timestamppb.New(ts.SentAt)
		}
		kept = append(kept, g)
	}
	cc.GenericXdsConfigs = kept
	return cc
}

// debugResponse is a ready DiscoveryResponse for the stream server, which
// sets its nonce.
type debugResponse struct {
	req  *cachev3.Request
	resp *discoveryv3.DiscoveryResponse
}

var _ cachev3.Response = (*debugResponse)(nil)

func (r *debugResponse) GetDiscoveryResponse() (*discoveryv3.DiscoveryResponse, error) {
	return r.resp, nil
}
func (r *debugResponse) GetRequest() *discoveryv3.DiscoveryRequest { return r.req }
func (r *debugResponse) GetVersion() (string, error)               { return r.resp.GetVersionInfo(), nil }
func (r *debugResponse) GetResponseVersion() string                { return r.resp.GetVersionInfo() }

// GetReturnedResources is nil: a debug answer is not a resource set the
// client holds.
func (r *debugResponse) GetReturnedResources() map[string]string { return nil }
func (r *debugResponse) GetContext() context.Context             { return context.Background() }
