package xds

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/genproto/googleapis/rpc/status"
	"k8s.io/utils/clock"

	"github.com/meshfed/meshfed/pkg/proxystatus"
	"github.com/meshfed/meshfed/pkg/version"
	"github.com/meshfed/meshfed/pkg/xdsnode"
)

// MetadataIstioVersion is the node metadata key of an Istio proxy's
// version, shown in the VERSION column when set.
const MetadataIstioVersion = "ISTIO_VERSION"

// recentResponses is how many responses per stream and type the tracker
// remembers by nonce, so that the ACK or NACK of a response that was
// overtaken by a newer one still finds its version.
const recentResponses = 4

// StatusTracker follows, for every xDS stream of this replica, what each
// proxy was sent and what it ACKed or NACKed, per type. It is fed by the
// go-control-plane stream server's callbacks.
//
// Its methods may be called concurrently from any number of stream
// goroutines; each takes one mutex for a few map operations and never
// blocks otherwise. Records are keyed by node ID: when a proxy has two
// streams open (a reconnect that overtook the old stream's close), the
// newer stream's record stands for it.
type StatusTracker struct {
	replica     string
	hubVersion  string // this replica's build, in every record
	clk         clock.PassiveClock
	convergence *prometheus.HistogramVec
	changes     chan struct{}

	mu      sync.Mutex                            // guards streams, byNode and dirty
	streams map[streamKey]*proxyStream            // every open stream
	byNode  map[string]map[streamKey]*proxyStream // streams whose node is known, by node ID
	dirty   map[string]struct{}                   // node IDs changed since TakeChanges
	// epochOf returns the config epoch a version holds (ledger.epochOf);
	// nil leaves records without epochs. Set before the first stream.
	epochOf func(version string) uint64
}

// streamKey identifies a stream: SotW and Delta streams are numbered
// independently by go-control-plane.
type streamKey struct {
	delta bool
	id    int64
}

// proxyStream is one stream's state; guarded by StatusTracker.mu.
type proxyStream struct {
	key                          streamKey
	node, name, cluster, version string
	namespace, locality          string
	connected, lastChange        time.Time
	types                        map[string]*typeState // by type URL
}

// typeState is one type's state on a stream.
type typeState struct {
	proxystatus.TypeStatus
	nackNonce string                        // nonce of the outstanding NACK
	recent    [recentResponses]sentResponse // ring of the last responses
	next      int
}

type sentResponse struct {
	nonce, version string
	at             time.Time
}

func (ts *typeState) sent(nonce, version string, at time.Time) {
	ts.Sent, ts.SentNonce, ts.SentAt = version, nonce, at
	ts.recent[ts.next] = sentResponse{nonce: nonce, version: version, at: at}
	ts.next = (ts.next + 1) % recentResponses
}

func (ts *typeState) lookup(nonce string) (sentResponse, bool) {
	for _, r := range ts.recent {
		if r.nonce == nonce && nonce != "" {
			return r, true
		}
	}
	return sentResponse{}, false
}

// NewStatusTracker returns a tracker for replica. It registers
// meshfed_xds_proxy_convergence_seconds with reg when reg is not nil.
func NewStatusTracker(replica string, clk clock.PassiveClock, reg prometheus.Registerer) *StatusTracker {
	if clk == nil {
		clk = clock.RealClock{}
	}
	t := &StatusTracker{
		replica: replica, hubVersion: version.Get().Version,
		clk: clk,
		convergence: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "meshfed_xds_proxy_convergence_seconds",
			Help: "Time from sending an xDS response to receiving the proxy's ACK of it, by xDS type.",
			// 0.5 ms to ~16 s: a local ACK takes about a millisecond; a
			// proxy that needs seconds is worth seeing.
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"type"}),
		changes: make(chan struct{}, 1),
		streams: map[streamKey]*proxyStream{},
		byNode:  map[string]map[streamKey]*proxyStream{},
		dirty:   map[string]struct{}{},
	}
	if reg != nil {
		reg.MustRegister(t.convergence)
	}
	return t
}

// Callbacks returns go-control-plane callbacks that feed t alone; the
// hub's server calls t's methods from its own callbacks instead.
func (t *StatusTracker) Callbacks() serverv3.Callbacks {
	return serverv3.CallbackFuncs{
		StreamOpenFunc: func(_ context.Context, id int64, _ string) error {
			t.StreamOpened(false, id)
			return nil
		},
		StreamClosedFunc: func(id int64, _ *corev3.Node) { t.StreamClosed(false, id) },
		DeltaStreamOpenFunc: func(_ context.Context, id int64, _ string) error {
			t.StreamOpened(true, id)
			return nil
		},
		DeltaStreamClosedFunc: func(id int64, _ *corev3.Node) { t.StreamClosed(true, id) },
		StreamRequestFunc: func(id int64, req *discoveryv3.DiscoveryRequest) error {
			t.OnRequest(id, req)
			return nil
		},
		StreamResponseFunc: func(_ context.Context, id int64, _ *discoveryv3.DiscoveryRequest, resp *discoveryv3.DiscoveryResponse) {
			t.OnResponse(id, resp)
		},
		StreamDeltaRequestFunc: func(id int64, req *discoveryv3.DeltaDiscoveryRequest) error {
			t.OnDeltaRequest(id, req)
			return nil
		},
		StreamDeltaResponseFunc: func(id int64, _ *discoveryv3.DeltaDiscoveryRequest, resp *discoveryv3.DeltaDiscoveryResponse) {
			t.OnDeltaResponse(id, resp)
		},
	}
}

// useEpochs makes records carry the config epochs of their versions, by
// epochOf (the server's ledger). Call it before the first stream.
func (t *StatusTracker) useEpochs(epochOf func(version string) uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.epochOf = epochOf
}

// touchAll marks every proxy's record changed: a config epoch was sealed,
// so the epochs its ACKed versions hold may have grown.
func (t *StatusTracker) touchAll() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for node := range t.byNode {
		t.markLocked(node)
	}
}

// StreamOpened records a new SotW (delta false) or Delta stream. Its proxy
// shows in Records once its first request names the node.
func (t *StatusTracker) StreamOpened(delta bool, id int64) {
	k := streamKey{delta, id}
	now := t.clk.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.streams[k]; !ok {
		t.streams[k] = &proxyStream{key: k, connected: now, lastChange: now, types: map[string]*typeState{}}
	}
}

// StreamClosed forgets a stream.
func (t *StatusTracker) StreamClosed(delta bool, id int64) {
	k := streamKey{delta, id}
	t.mu.Lock()
	defer t.mu.Unlock()
	s, ok := t.streams[k]
	if !ok {
		return
	}
	delete(t.streams, k)
	if s.node == "" {
		return
	}
	if m := t.byNode[s.node]; m != nil {
		delete(m, k)
		if len(m) == 0 {
			delete(t.byNode, s.node)
		}
	}
	t.markLocked(s.node)
}

// OnRequest records a SotW request: the node on the stream's first one,
// and the ACK or NACK of a response it carries.
func (t *StatusTracker) OnRequest(id int64, req *discoveryv3.DiscoveryRequest) {
	t.request(streamKey{false, id}, req.GetNode(), req.GetTypeUrl(), req.GetVersionInfo(), req.GetResponseNonce(), req.GetErrorDetail())
}

// OnDeltaRequest records a Delta request.
func (t *StatusTracker) OnDeltaRequest(id int64, req *discoveryv3.DeltaDiscoveryRequest) {
	// A Delta request carries no version; the ACKed one is looked up by
	// nonce.
	t.request(streamKey{true, id}, req.GetNode(), req.GetTypeUrl(), "", req.GetResponseNonce(), req.GetErrorDetail())
}

// OnResponse records a SotW response about to be sent.
func (t *StatusTracker) OnResponse(id int64, resp *discoveryv3.DiscoveryResponse) {
	t.response(streamKey{false, id}, resp.GetTypeUrl(), resp.GetVersionInfo(), resp.GetNonce())
}

// OnDeltaResponse records a Delta response about to be sent. Its version is
// the cache's system version.
func (t *StatusTracker) OnDeltaResponse(id int64, resp *discoveryv3.DeltaDiscoveryResponse) {
	t.response(streamKey{true, id}, resp.GetTypeUrl(), resp.GetSystemVersionInfo(), resp.GetNonce())
}

func (t *StatusTracker) request(k streamKey, node *corev3.Node, typeURL, version, nonce string, nack *status.Status) {
	// Istio's debug types are asked for by tools (istioctl), not proxies:
	// a stream that asks only for them is never listed as a proxy.
	if typeURL == "" || IsDebugType(typeURL) {
		return
	}
	now := t.clk.Now()
	var converged time.Duration = -1
	t.mu.Lock()
	s := t.streamLocked(k, now)
	changed := false
	if s.node == "" && node.GetId() != "" {
		t.bindLocked(s, node)
		changed = true
	}
	ts := s.types[typeURL]
	if ts == nil {
		ts = &typeState{TypeStatus: proxystatus.TypeStatus{TypeURL: typeURL}}
		s.types[typeURL] = ts
		changed = true
	}
	if nonce != "" {
		sent, known := ts.lookup(nonce)
		switch {
		case nack != nil:
			msg := clip(nack.GetMessage(), maxDetailBytes)
			if msg == "" {
				msg = fmt.Sprintf("rejected with code %d and no message", nack.GetCode())
			}
			if ts.Nack != msg || ts.nackNonce != nonce {
				ts.Nack, ts.nackNonce = msg, nonce
				ts.NackVersion = ""
				if known {
					ts.NackVersion = sent.version
				}
				changed = true
			}
		case nonce == ts.nackNonce:
			// A later request (say, new resource names) still answering
			// the NACKed response: not an ACK.
		case nonce != ts.AckedNonce:
			if version == "" && known {
				version = sent.version
			}
			ts.Acked, ts.AckedNonce, ts.AckedAt = version, nonce, now
			ts.Nack, ts.NackVersion, ts.nackNonce = "", "", ""
			if known {
				converged = now.Sub(sent.at)
			}
			changed = true
		}
	}
	if changed {
		s.lastChange = now
		t.markLocked(s.node)
	}
	t.mu.Unlock()
	if converged >= 0 {
		t.convergence.WithLabelValues(shortType(typeURL)).Observe(converged.Seconds())
	}
}

func (t *StatusTracker) response(k streamKey, typeURL, version, nonce string) {
	if IsDebugType(typeURL) {
		return
	}
	now := t.clk.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.streamLocked(k, now)
	ts := s.types[typeURL]
	if ts == nil {
		ts = &typeState{TypeStatus: proxystatus.TypeStatus{TypeURL: typeURL}}
		s.types[typeURL] = ts
	}
	ts.sent(nonce, version, now)
	s.lastChange = now
	t.markLocked(s.node)
}

// streamLocked returns the stream of k, creating it if its open was not
// seen (a tracker attached to a running server).
func (t *StatusTracker) streamLocked(k streamKey, now time.Time) *proxyStream {
	s := t.streams[k]
	if s == nil {
		s = &proxyStream{key: k, connected: now, lastChange: now, types: map[string]*typeState{}}
		t.streams[k] = s
	}
	return s
}

func (t *StatusTracker) bindLocked(s *proxyStream, node *corev3.Node) {
	s.node = node.GetId()
	s.name = xdsnode.NameOf(s.node)
	s.cluster = node.GetMetadata().GetFields()[xdsnode.MetadataClusterID].GetStringValue()
	s.version = proxyVersion(node)
	s.namespace = node.GetMetadata().GetFields()[xdsnode.MetadataNamespace].GetStringValue()
	s.locality = localityString(node.GetLocality())
	m := t.byNode[s.node]
	if m == nil {
		m = map[streamKey]*proxyStream{}
		t.byNode[s.node] = m
	}
	m[s.key] = s
}

// proxyVersion is ISTIO_VERSION metadata, else the user agent's version.
func proxyVersion(node *corev3.Node) string {
	if v := node.GetMetadata().GetFields()[MetadataIstioVersion].GetStringValue(); v != "" {
		return v
	}
	if v := node.GetUserAgentVersion(); v != "" {
		return v
	}
	if bv := node.GetUserAgentBuildVersion().GetVersion(); bv != nil {
		return fmt.Sprintf("%d.%d.%d", bv.GetMajorNumber(), bv.GetMinorNumber(), bv.GetPatch())
	}
	return ""
}

// markLocked notes that node's record changed and signals Changes.
func (t *StatusTracker) markLocked(node string) {
	if node == "" {
		return
	}
	t.dirty[node] = struct{}{}
	select {
	case t.changes <- struct{}{}:
	default:
	}
}

// Changes signals, coalesced (capacity 1), that some record changed,
// appeared or went away since the last TakeChanges.
func (t *StatusTracker) Changes() <-chan struct{} { return t.changes }

// TakeChanges returns the records that changed or appeared since the last
// call, and the node IDs of the proxies that are gone, in no order (after
// a push, every proxy's record: sorting 2,000 of them was 2 % of the
// hub's CPU under pushes, and their readers keep them by node ID). It has
// one consumer: Drain, or whoever calls it instead.
func (t *StatusTracker) TakeChanges() (changed []proxystatus.Record, removed []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.dirty) > 0 {
		// After a push, every proxy: grown by append, the slice of large
		// records would be copied a dozen times.
		changed = make([]proxystatus.Record, 0, len(t.dirty))
	}
	for node := range t.dirty {
		if s := t.newestLocked(node); s != nil {
			changed = append(changed, t.recordLocked(s))
		} else {
			removed = append(removed, node)
		}
	}
	clear(t.dirty)
	return changed, removed
}

// Records returns the record of every proxy connected to this replica,
// sorted.
func (t *StatusTracker) Records() []proxystatus.Record {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]proxystatus.Record, 0, len(t.byNode))
	for node := range t.byNode {
		out = append(out, t.recordLocked(t.newestLocked(node)))
	}
	proxystatus.Sort(out)
	return out
}

// All is Records, so that a StatusTracker is a StatusSource.
func (t *StatusTracker) All() []proxystatus.Record { return t.Records() }

// newestLocked returns node's most recently opened stream, nil if none.
func (t *StatusTracker) newestLocked(node string) *proxyStream {
	var best *proxyStream
	for _, s := range t.byNode[node] {
		if best == nil || s.connected.After(best.connected) ||
			(s.connected.Equal(best.connected) && s.key.id > best.key.id) {
			best = s
		}
	}
	return best
}

func (t *StatusTracker) recordLocked(s *proxyStream) proxystatus.Record {
	r := proxystatus.Record{
		Proxy: s.node, Name: s.name, Cluster: s.cluster, Replica: t.replica, HubVersion: t.hubVersion,
		Connected: s.connected, LastChange: s.lastChange, Version: s.version,
		Namespace: s.namespace, Locality: s.locality,
		Types: make(map[string]proxystatus.TypeStatus, len(s.types)),
	}
	for url, ts := range s.types {
		v := ts.TypeStatus
		v.Status = v.Compute()
		if t.epochOf != nil {
			v.AckedEpoch = t.epochOf(v.Acked)
			if v.Nack != "" {
				v.NackEpoch = t.epochOf(v.NackVersion)
			}
		}
		r.Types[proxystatus.ShortType(url)] = v
	}
	return r
}

// Drain applies the tracker's changes to sink until ctx ends: it calls
// sink once at start with every record (removed nil), then with each
// batch from TakeChanges. sink runs on Drain's goroutine; changes made
// while it runs coalesce into the next batch. It is for a reader that has
// no batching of its own (a test's proxystatus.Fleet); the hub's fleet
// status (hub/fleetstatus) calls TakeChanges in its own batches instead.
func (t *StatusTracker) Drain(ctx context.Context, sink func(changed []proxystatus.Record, removed []string)) {
	// Everything so far is in Records; clear the dirty set so it is not
	// sent twice.
	t.TakeChanges()
	sink(t.Records(), nil)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.Changes():
			if changed, removed := t.TakeChanges(); len(changed) > 0 || len(removed) > 0 {
				sink(changed, removed)
			}
		}
	}
}

// localityString is "<region>/<zone>/<subzone>", or "" for no locality.
func localityString(l *corev3.Locality) string {
	if l.GetRegion() == "" && l.GetZone() == "" && l.GetSubZone() == "" {
		return ""
	}
	return l.GetRegion() + "/" + l.GetZone() + "/" + l.GetSubZone()
}
