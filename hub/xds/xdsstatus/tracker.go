package xdsstatus

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/genproto/googleapis/rpc/status"
	"k8s.io/utils/clock"

	"github.com/meshfed/meshfed/hub/xds/ads"
	"github.com/meshfed/meshfed/pkg/proxystatus"
	"github.com/meshfed/meshfed/pkg/version"
	"github.com/meshfed/meshfed/pkg/xdsnode"
)

// recentResponses is how many responses per stream and type the tracker
// remembers by nonce, so that the ACK or NACK of a response that was
// overtaken by a newer one still finds its version.
const recentResponses = 4

// Tracker follows, for every xDS stream of this replica, what each
// proxy was sent and what it ACKed or NACKed, per type. Each stream has
// its record (a Stream, held by the stream's conn), fed by the
// stream's goroutine under the record's own lock; the tracker only
// indexes the records by node ID and notes which changed, under its lock,
// which a stream takes only after releasing its record's. Records are
// keyed by node ID: when a proxy has two streams open (a reconnect that
// overtook the old stream's close), the newer stream's record stands for
// it.
type Tracker struct {
	replica     string
	hubVersion  string // this replica's build, in every record
	clk         clock.PassiveClock
	convergence *prometheus.HistogramVec
	changes     chan struct{}

	mu     sync.Mutex                      // guards byNode and dirty; taken before a record's lock, never after
	byNode map[string]map[*Stream]struct{} // streams whose node is known, by node ID
	dirty  map[string]struct{}             // node IDs changed since TakeChanges
	// epochOf returns the config epoch a version holds (ledger.epochOf);
	// nil leaves records without epochs. Set before the first stream.
	epochOf func(version string) uint64
}

// Stream is the status record of one stream: made by Open when the
// stream opens, fed by the stream's goroutine (OnRequest, OnResponse, ...)
// and freed by Close.
type Stream struct {
	t         *Tracker
	key       streamKey // set at Open, never written again
	connected time.Time // set at Open, never written again

	mu                           sync.Mutex // guards what follows
	node, name, cluster, version string
	namespace, locality, network string
	identity                     string
	lastChange                   time.Time
	types                        map[string]*typeState // by type URL
	closed                       bool
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

// NewTracker returns a tracker for replica. It registers
// meshfed_xds_proxy_convergence_seconds with reg when reg is not nil.
func NewTracker(replica string, clk clock.PassiveClock, reg prometheus.Registerer) *Tracker {
	if clk == nil {
		clk = clock.RealClock{}
	}
	t := &Tracker{
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
		byNode:  map[string]map[*Stream]struct{}{},
		dirty:   map[string]struct{}{},
	}
	if reg != nil {
		reg.MustRegister(t.convergence)
	}
	return t
}

// Handler returns a stream handler (ads.Handler) that feeds t alone, for
// a stream server of its own; the hub's server feeds t from its conns.
func (t *Tracker) Handler() ads.Handler { return trackerHandler{t} }

// trackerHandler opens a Stream per stream.
type trackerHandler struct{ t *Tracker }

func (h trackerHandler) Open(_ context.Context, id int64, delta bool) (ads.Stream, error) {
	return trackerStream{h.t.Open(delta, id)}, nil
}

// trackerStream feeds one stream's record.
type trackerStream struct{ *Stream }

func (s trackerStream) OnRequest(req *discoveryv3.DiscoveryRequest) error {
	s.Stream.OnRequest(req)
	return nil
}

func (s trackerStream) OnDeltaRequest(req *discoveryv3.DeltaDiscoveryRequest) error {
	s.Stream.OnDeltaRequest(req)
	return nil
}

func (s trackerStream) Closed() { s.Close() }

// UseEpochs makes records carry the config epochs of their versions, by
// epochOf (the server's ledger). Call it before the first stream.
func (t *Tracker) UseEpochs(epochOf func(version string) uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.epochOf = epochOf
}

// TouchAll marks every proxy's record changed: a config epoch was sealed,
// so the epochs its ACKed versions hold may have grown.
func (t *Tracker) TouchAll() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for node := range t.byNode {
		t.markLocked(node)
	}
}

// Open returns the record of a new SotW (delta false) or Delta stream.
// Its proxy shows in Records once its first request names the node.
func (t *Tracker) Open(delta bool, id int64) *Stream {
	now := t.clk.Now()
	return &Stream{t: t, key: streamKey{delta, id}, connected: now, lastChange: now, types: map[string]*typeState{}}
}

// SetIdentity records who the stream's caller proved to be
// (proxystatus.Record.Identity).
func (s *Stream) SetIdentity(id string) {
	s.mu.Lock()
	if s.identity == id || s.closed {
		s.mu.Unlock()
		return
	}
	s.identity = id
	node := s.node
	s.mu.Unlock()
	if node != "" {
		s.t.mu.Lock()
		s.t.markLocked(node)
		s.t.mu.Unlock()
	}
}

// Close forgets the stream; closing it again does nothing.
func (s *Stream) Close() {
	s.mu.Lock()
	node, closed := s.node, s.closed
	s.closed = true
	s.mu.Unlock()
	if closed || node == "" {
		return
	}
	t := s.t
	t.mu.Lock()
	defer t.mu.Unlock()
	if m := t.byNode[node]; m != nil {
		delete(m, s)
		if len(m) == 0 {
			delete(t.byNode, node)
		}
	}
	t.markLocked(node)
}

// OnRequest records a SotW request: the node on the stream's first one,
// and the ACK or NACK of a response it carries.
func (s *Stream) OnRequest(req *discoveryv3.DiscoveryRequest) {
	s.request(req.GetNode(), req.GetTypeUrl(), req.GetVersionInfo(), req.GetResponseNonce(), req.GetErrorDetail())
}

// OnDeltaRequest records a Delta request.
func (s *Stream) OnDeltaRequest(req *discoveryv3.DeltaDiscoveryRequest) {
	// A Delta request carries no version; the ACKed one is looked up by
	// nonce.
	s.request(req.GetNode(), req.GetTypeUrl(), "", req.GetResponseNonce(), req.GetErrorDetail())
}

// OnResponse records a SotW response about to be sent.
func (s *Stream) OnResponse(resp *discoveryv3.DiscoveryResponse) {
	s.response(resp.GetTypeUrl(), resp.GetVersionInfo(), resp.GetNonce())
}

// OnDeltaResponse records a Delta response about to be sent. Its version is
// the cache's system version.
func (s *Stream) OnDeltaResponse(resp *discoveryv3.DeltaDiscoveryResponse) {
	s.response(resp.GetTypeUrl(), resp.GetSystemVersionInfo(), resp.GetNonce())
}

func (s *Stream) request(node *corev3.Node, typeURL, version, nonce string, nack *status.Status) {
	// Istio's debug types are asked for by tools (istioctl), not proxies:
	// a stream that asks only for them is never listed as a proxy.
	if typeURL == "" || IsDebugType(typeURL) {
		return
	}
	now := s.t.clk.Now()
	var converged time.Duration = -1
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	changed, bound := false, false
	if s.node == "" && node.GetId() != "" {
		s.bindLocked(node)
		changed, bound = true, true
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
			msg := Clip(nack.GetMessage(), MaxDetailBytes)
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
	}
	id := s.node
	s.mu.Unlock()
	if changed {
		s.t.changed(s, id, bound)
	}
	if converged >= 0 {
		s.t.convergence.WithLabelValues(TypeLabel(typeURL)).Observe(converged.Seconds())
	}
}

func (s *Stream) response(typeURL, version, nonce string) {
	if IsDebugType(typeURL) {
		return
	}
	now := s.t.clk.Now()
	s.mu.Lock()
	ts := s.types[typeURL]
	if ts == nil {
		ts = &typeState{TypeStatus: proxystatus.TypeStatus{TypeURL: typeURL}}
		s.types[typeURL] = ts
	}
	ts.sent(nonce, version, now)
	s.lastChange = now
	id := s.node
	s.mu.Unlock()
	s.t.changed(s, id, false)
}

// changed marks the record of node id changed, indexing s under it first
// when it was just bound to it.
func (t *Tracker) changed(s *Stream, id string, bound bool) {
	if id == "" {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if bound {
		m := t.byNode[id]
		if m == nil {
			m = map[*Stream]struct{}{}
			t.byNode[id] = m
		}
		m[s] = struct{}{}
	}
	t.markLocked(id)
}

// bindLocked records the node the stream speaks for.
func (s *Stream) bindLocked(node *corev3.Node) {
	s.node = node.GetId()
	s.name = xdsnode.NameOf(s.node)
	s.cluster = node.GetMetadata().GetFields()[xdsnode.MetadataClusterID].GetStringValue()
	s.version = proxyVersion(node)
	s.namespace = node.GetMetadata().GetFields()[xdsnode.MetadataNamespace].GetStringValue()
	s.locality = localityString(node.GetLocality())
	s.network = node.GetMetadata().GetFields()[xdsnode.MetadataNetwork].GetStringValue()
}

// proxyVersion is ISTIO_VERSION metadata, else the user agent's version.
func proxyVersion(node *corev3.Node) string {
	if v := node.GetMetadata().GetFields()[xdsnode.MetadataIstioVersion].GetStringValue(); v != "" {
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
func (t *Tracker) markLocked(node string) {
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
func (t *Tracker) Changes() <-chan struct{} { return t.changes }

// TakeChanges returns the records that changed or appeared since the last
// call, and the node IDs of the proxies that are gone, in no order (after
// a push, every proxy's record: sorting 2,000 of them was 2 % of the
// hub's CPU under pushes, and their readers keep them by node ID). It has
// one consumer: Drain, or whoever calls it instead.
func (t *Tracker) TakeChanges() (changed []proxystatus.Record, removed []string) {
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
func (t *Tracker) Records() []proxystatus.Record {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]proxystatus.Record, 0, len(t.byNode))
	for node := range t.byNode {
		out = append(out, t.recordLocked(t.newestLocked(node)))
	}
	proxystatus.Sort(out)
	return out
}

// All is Records, so that a Tracker is a StatusSource.
func (t *Tracker) All() []proxystatus.Record { return t.Records() }

// newestLocked returns node's most recently opened stream, nil if none.
func (t *Tracker) newestLocked(node string) *Stream {
	var best *Stream
	for s := range t.byNode[node] {
		if best == nil || s.connected.After(best.connected) ||
			(s.connected.Equal(best.connected) && s.key.id > best.key.id) {
			best = s
		}
	}
	return best
}

// recordLocked returns s's record; t.mu is held, s.mu is taken.
func (t *Tracker) recordLocked(s *Stream) proxystatus.Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := proxystatus.Record{
		Proxy: s.node, Name: s.name, Cluster: s.cluster, Replica: t.replica, HubVersion: t.hubVersion,
		Connected: s.connected, LastChange: s.lastChange, Version: s.version,
		Namespace: s.namespace, Locality: s.locality, Network: s.network, Identity: s.identity,
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
func (t *Tracker) Drain(ctx context.Context, sink func(changed []proxystatus.Record, removed []string)) {
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

// streamKey identifies a stream in its status record: its protocol and
// the stream server's ID, unique across protocols.
// streamKey identifies a stream in its status record: its protocol and
// the stream server's ID, unique across protocols.
type streamKey struct {
	delta bool
	id    int64
}

// MaxDetailBytes bounds a NACK message as a record keeps it.
const MaxDetailBytes = 4096

// Clip returns s cut to at most n bytes (on a rune boundary), followed by
// how long it was when it was cut.
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "… (" + strconv.Itoa(len(s)) + " bytes)"
}

// TypeLabel is the metric label of a type URL: proxystatus's short name,
// or "other" for a type the hub does not know, so that a proxy cannot grow
// the label set by asking for made-up types.
func TypeLabel(typeURL string) string {
	if short := proxystatus.ShortType(typeURL); short != typeURL {
		return short
	}
	return "other"
}
