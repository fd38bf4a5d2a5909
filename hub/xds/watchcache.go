package xds

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/meshfed/meshfed/hub/xds/ads"
)

// watchCache holds the resources of one type and answers the stream
// server's watches on them, as go-control-plane's LinearCache does, with
// the same responses (TestWatchCacheAnswersAsLinearCache), at a cost that
// does not grow with how many resources a watch subscribes to.
//
// A proxy subscribes to every load assignment of the mesh, and ACKs each
// response; the stream server opens a new watch on every request. A
// LinearCache indexes each watch under every name it subscribes to, so
// opening and closing one costs a map write per subscribed name, and it
// compares every subscribed resource on each update and on each ACK. With
// a few hundred services that was about a quarter of the hub's CPU per
// proxy update. Here a watch is one entry in one map; an update compares
// only the resources it changed (a watch is opened only once the proxy is
// up to date, and it closes on its first answer, so only a change since
// can make it differ); and the ACK of an answer given at the cache's
// current version opens its watch without a comparison. A SotW ACK names
// the version; a Delta one does not, and the stream server says which
// version it ACKs (ads.Hints.AckOf).
//
// The stream server's other hint, ads.Hints.Outdated, names resources a
// stream is to be sent again although it holds them (a load assignment
// after its Envoy cluster changed): an answer sends each, in other bytes
// of the same meaning (twin) when the stream holds its current version.
// A cache of Envoy clusters (rewarmsOf set) says, with each answer, whose
// load assignments are to follow it (ads.Rewarming).
//
// Versions are LinearCache's: the cache's version is the prefix and a
// counter that every write advances, a SotW resource's is the cache
// version that wrote it, and a Delta resource's is a hash of its bytes.
type watchCache struct {
	typeURL string
	prefix  string
	// fullState: a SotW answer holds every subscribed resource, not only
	// those that changed (listeners and clusters, as xDS requires).
	fullState bool

	// twin, when set, returns a resource of the same meaning as its
	// argument in other bytes (see rewarmed); set at construction.
	twin func(types.Resource) types.Resource
	// rewarmsOf, when set, names the load assignment that an Envoy
	// cluster warms with ("" for none); set before the first watch.
	rewarmsOf func(types.Resource) string
	// marshal is cachev3.MarshalResource (a test observes its calls).
	marshal func(types.Resource) ([]byte, error)
	// deltaSeen: a Delta stream has watched the cache, so new resources
	// are hashed (their Delta versions) before the lock too.
	deltaSeen atomic.Bool

	mu sync.Mutex // guards what follows, and the known versions of open Delta watches
	// version counts the writes; written under mu, read without it by
	// Version, so that a ledger seal takes no lock of the cache.
	version   atomic.Uint64
	resources map[string]*entry
	watches   map[uint64]*cacheWatch
	lastID    uint64
}

// entry is one resource as the cache holds it: marshalled once, and
// hashed once if a Delta stream asks for its version.
type entry struct {
	name    string
	res     types.Resource
	version string // the cache version that wrote it: its SotW version
	bytes   func() ([]byte, error)
	hash    func() (string, error)
	// twin is the entry sent to a stream that holds this one and is to
	// be sent it again (ads.Hints.Outdated); itself when the cache has
	// no twin function.
	twin func() *entry
}

func newEntry(name string, res types.Resource, version string, twin func(types.Resource) types.Resource,
	marshal func(types.Resource) ([]byte, error)) *entry {
	bytes := sync.OnceValues(func() ([]byte, error) { return marshal(res) })
	e := &entry{
		name:    name,
		res:     res,
		version: version,
		bytes:   bytes,
		hash: sync.OnceValues(func() (string, error) {
			b, err := bytes()
			if err != nil {
				return "", err
			}
			return cachev3.HashResource(b), nil
		}),
	}
	e.twin = func() *entry { return e }
	if twin != nil {
		// The version is read when the twin is first needed, under the
		// cache's lock: UpdateResources sets it there.
		e.twin = sync.OnceValue(func() *entry { return newEntry(name, twin(res), e.version, nil, marshal) })
	}
	return e
}

// any is e's bytes as an answer of typeURL carries them.
func (e *entry) any(typeURL string) (*anypb.Any, error) {
	b, err := e.bytes()
	if err != nil {
		return nil, fmt.Errorf("xds: marshalling %s: %w", e.name, err)
	}
	return &anypb.Any{TypeUrl: typeURL, Value: b}, nil
}

// cacheWatch is one open watch: a SotW one (sotw set) or a Delta one.
type cacheWatch struct {
	sub   cachev3.Subscription
	sotw  chan cachev3.Response
	req   *cachev3.Request
	delta chan cachev3.DeltaResponse
	dreq  *cachev3.DeltaRequest
	// gone: resources the proxy knows that were removed while the watch
	// was open, which a SotW answer of a type that cannot remove them
	// waits for, to forget them as known.
	gone []string
}

func newWatchCache(typeURL, prefix string, initial map[string]types.Resource) *watchCache {
	c := &watchCache{
		typeURL:   typeURL,
		prefix:    prefix,
		fullState: cachev3.ResourceRequiresFullStateInSotw(typeURL),
		resources: make(map[string]*entry, len(initial)),
		watches:   map[uint64]*cacheWatch{},
		marshal:   cachev3.MarshalResource,
	}
	if typeURL == resourcev3.EndpointType {
		c.twin = rewarmed
	}
	v := c.versionLocked()
	for name, res := range initial {
		// Marshalled on its first answer, not here: a group's cache
		// holds every service's assignment, of which its proxies may
		// watch a few (see the package documentation).
		c.resources[name] = newEntry(name, res, v, c.twin, c.marshal)
	}
	return c
}

func (c *watchCache) versionLocked() string {
	return c.prefix + strconv.FormatUint(c.version.Load(), 10)
}

// Version returns the counter of the cache's version: how many writes it
// took.
func (c *watchCache) Version() uint64 { return c.version.Load() }

// UpdateResources writes up and removes del as one version, and answers
// every watch that the change concerns. The new resources are marshalled
// (and hashed, once a Delta stream has watched the cache) before the
// cache's lock is taken, so that no stream's watch waits for it.
func (c *watchCache) UpdateResources(up map[string]types.Resource, del []string) error {
	entries := make([]*entry, 0, len(up))
	for name, res := range up {
		if res == nil {
			return fmt.Errorf("xds: %s %q: nil resource", c.typeURL, name)
		}
		e := newEntry(name, res, "", c.twin, c.marshal)
		// Errors are kept, and met when the entry is answered.
		_, _ = e.bytes()
		if c.deltaSeen.Load() {
			_, _ = e.hash()
		}
		entries = append(entries, e)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.version.Add(1)
	v := c.versionLocked()
	modified := make([]string, 0, len(up)+len(del))
	for _, e := range entries {
		e.version = v
		c.resources[e.name] = e
		modified = append(modified, e.name)
	}
	for _, name := range del {
		delete(c.resources, name)
		modified = append(modified, name)
	}
	var errs []error
	for id, w := range c.watches {
		answered, err := c.answerLocked(w, modified, false)
		if err != nil {
			errs = append(errs, err)
		}
		if answered {
			delete(c.watches, id)
		}
	}
	return errors.Join(errs...)
}

// adopt makes the cache hold res where it differs: a name whose resource
// is proto.Equal to the one held takes res's object in a new entry that
// keeps the old one's version, so nothing is sent again (the
// planner's objects, which share endpoints across groups, replace copies
// built apart from it); a differing or new one is written as
// UpdateResources writes it; with others, names res lacks are deleted.
// The comparisons run before the cache's lock is taken; an entry that
// changed meanwhile is left to the write.
func (c *watchCache) adopt(res map[string]types.Resource, others bool) error {
	held := c.GetResources()
	up := map[string]types.Resource{}
	same := map[string][2]types.Resource{} // by name: held, adopted
	for n, r := range res {
		if h, ok := held[n]; ok && proto.Equal(h, r) {
			same[n] = [2]types.Resource{h, r}
		} else {
			up[n] = r
		}
	}
	var del []string
	if others {
		for n := range held {
			if _, ok := res[n]; !ok {
				del = append(del, n)
			}
		}
	}
	if len(same) > 0 {
		c.mu.Lock()
		for n, pair := range same {
			if e := c.resources[n]; e != nil && e.res == pair[0] {
				// Marshalled anew (to the same bytes: marshalling is
				// deterministic) rather than keep e's marshalling, whose
				// closure may hold e's resource, the copy to free.
				c.resources[n] = newEntry(n, pair[1], e.version, c.twin, c.marshal)
			}
		}
		c.mu.Unlock()
	}
	if len(up) == 0 && len(del) == 0 {
		return nil
	}
	return c.UpdateResources(up, del)
}

// has reports whether the cache holds a resource of name.
func (c *watchCache) has(name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.resources[name]
	return ok
}

// GetResources returns a copy of what the cache holds.
func (c *watchCache) GetResources() map[string]types.Resource {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]types.Resource, len(c.resources))
	for name, e := range c.resources {
		out[name] = e.res
	}
	return out
}

// CreateWatch answers a SotW request at once if the proxy lacks something
// it subscribes to, and else opens a watch that the next change concerning
// it answers.
func (c *watchCache) CreateWatch(req *cachev3.Request, sub cachev3.Subscription, out chan cachev3.Response) (func(), error) {
	if req.GetTypeUrl() != c.typeURL {
		return nil, fmt.Errorf("xds: a %s request to the %s cache", req.GetTypeUrl(), c.typeURL)
	}
	// A request that holds no version of this cache (the first, or one
	// from another replica's) is answered even with nothing.
	always := !strings.HasPrefix(req.GetVersionInfo(), c.prefix) || req.GetVersionInfo() == ""
	w := &cacheWatch{sub: sub, sotw: out, req: req}
	c.mu.Lock()
	defer c.mu.Unlock()
	// The ACK of the current version by a proxy that knows a version of
	// every resource it subscribes to: the stream server keeps in the
	// subscription only what the proxy subscribes to, so equal sizes are
	// equal sets, and nothing was written since the versions it knows.
	upToDate := !sub.IsWildcard() && req.GetVersionInfo() == c.versionLocked() &&
		len(sub.ReturnedResources()) == len(sub.SubscribedResources()) &&
		len(ads.HintsOf(sub).Outdated) == 0
	if !upToDate {
		answered, err := c.answerLocked(w, nil, always)
		if err != nil || answered {
			return func() {}, err
		}
	}
	return c.trackLocked(w), nil
}

// CreateDeltaWatch is CreateWatch for a Delta request.
func (c *watchCache) CreateDeltaWatch(req *cachev3.DeltaRequest, sub cachev3.Subscription, out chan cachev3.DeltaResponse) (func(), error) {
	if req.GetTypeUrl() != c.typeURL {
		return nil, fmt.Errorf("xds: a %s request to the %s cache", req.GetTypeUrl(), c.typeURL)
	}
	c.deltaSeen.Store(true)
	// Envoy ends a wildcard subscription's initialisation on the first
	// answer, so the first request of one is answered even with nothing.
	always := sub.IsWildcard() && req.GetResponseNonce() == ""
	w := &cacheWatch{sub: sub, delta: out, dreq: req}
	c.mu.Lock()
	defer c.mu.Unlock()
	// The plain ACK of an answer given since the last write: the stream
	// knows what that answer left it.
	if ack := ads.HintsOf(sub).AckOf; ack != "" && ack == c.versionLocked() {
		return c.trackLocked(w), nil
	}
	answered, err := c.answerLocked(w, nil, always)
	if err != nil || answered {
		return nil, err
	}
	return c.trackLocked(w), nil
}

func (c *watchCache) trackLocked(w *cacheWatch) func() {
	c.lastID++
	id := c.lastID
	c.watches[id] = w
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		delete(c.watches, id)
	}
}

// Fetch is not served: the hub's REST answers come from its own caches.
func (c *watchCache) Fetch(context.Context, *cachev3.Request) (cachev3.Response, error) {
	return nil, errors.New("xds: fetch is not served by a watch cache")
}

// answerLocked compares what w's proxy knows with the cache, for the
// resources named in modified, or, when modified is nil, for all that w
// subscribes to and knows. If anything differs (or always), it sends w its
// answer and reports true.
func (c *watchCache) answerLocked(w *cacheWatch, modified []string, always bool) (bool, error) {
	changed, removed, err := c.diffLocked(w, modified)
	if err != nil {
		return false, err
	}
	if len(changed) == 0 && len(removed) == 0 && !always {
		return false, nil
	}
	rewarms := c.rewarmsLocked(changed)
	if w.delta != nil {
		w.delta <- &deltaResponse{
			req:       w.dreq,
			version:   c.versionLocked(),
			resources: changed,
			removed:   removed,
			returned:  returnedAfter(w, changed, removed),
			rewarms:   rewarms,
		}
		return true, nil
	}
	send := changed
	switch {
	case !c.fullState:
		// A SotW answer cannot remove a resource of these types, so one
		// with nothing new is not sent (but to a request that must be
		// answered); the next one forgets what was removed.
		if len(changed) == 0 && !always {
			w.gone = append(w.gone, removed...)
			return false, nil
		}
		removed = c.goneLocked(w, removed)
	case w.sub.IsWildcard():
		send = make([]*entry, 0, len(c.resources))
		for _, e := range c.resources {
			send = append(send, e)
		}
	default:
		send = make([]*entry, 0, len(w.sub.SubscribedResources()))
		for name := range w.sub.SubscribedResources() {
			if e, ok := c.resources[name]; ok {
				send = append(send, e)
			}
		}
	}
	w.sotw <- &sotwResponse{
		req:       w.req,
		version:   c.versionLocked(),
		resources: send,
		returned:  returnedAfter(w, send, removed),
		rewarms:   rewarms,
	}
	return true, nil
}

// rewarmsLocked names the load assignments that the Envoy clusters among
// changed warm with (see rewarmsOf).
func (c *watchCache) rewarmsLocked(changed []*entry) []string {
	if c.rewarmsOf == nil {
		return nil
	}
	var names []string
	for _, e := range changed {
		if n := c.rewarmsOf(e.res); n != "" {
			names = append(names, n)
		}
	}
	return names
}

// goneLocked adds to removed what w's proxy knows that was removed while
// w waited, and is still gone.
func (c *watchCache) goneLocked(w *cacheWatch, removed []string) []string {
	known := w.sub.ReturnedResources()
	for _, name := range w.gone {
		if _, ok := known[name]; !ok || slices.Contains(removed, name) {
			continue
		}
		if _, ok := c.resources[name]; !ok {
			removed = append(removed, name)
		}
	}
	return removed
}

// diffLocked returns the resources that w's proxy lacks or knows in
// another version, and those it knows that are gone (or that it no longer
// subscribes to), among modified (nil: all).
func (c *watchCache) diffLocked(w *cacheWatch, modified []string) (changed []*entry, removed []string, err error) {
	known := w.sub.ReturnedResources()
	subscribed := w.sub.SubscribedResources()
	wildcard := w.sub.IsWildcard()
	outdated := ads.HintsOf(w.sub).Outdated
	check := func(name string) error {
		version, ok := known[name]
		e, exists := c.resources[name]
		switch {
		case !exists:
			if ok {
				removed = append(removed, name)
			}
		case !ok:
			changed = append(changed, e)
		default:
			v, err := w.versionOf(e)
			if err != nil {
				return err
			}
			if v != version {
				changed = append(changed, e)
			} else if _, again := outdated[name]; again && modified == nil {
				changed = append(changed, e.twin())
			}
		}
		return nil
	}
	if modified != nil {
		for _, name := range modified {
			if _, ok := subscribed[name]; !ok && !wildcard {
				continue
			}
			if err := check(name); err != nil {
				return nil, nil, err
			}
		}
		return changed, removed, nil
	}
	if wildcard {
		for name := range c.resources {
			if err := check(name); err != nil {
				return nil, nil, err
			}
		}
		for name := range known {
			if _, ok := c.resources[name]; !ok {
				removed = append(removed, name)
			}
		}
		return changed, removed, nil
	}
	for name := range subscribed {
		if err := check(name); err != nil {
			return nil, nil, err
		}
	}
	for name := range known {
		if _, ok := subscribed[name]; !ok {
			removed = append(removed, name)
		}
	}
	return changed, removed, nil
}

// versionOf is e's version as w's protocol tracks it.
func (w *cacheWatch) versionOf(e *entry) (string, error) {
	if w.delta == nil {
		return e.version, nil
	}
	v, err := e.hash()
	if err != nil {
		return "", fmt.Errorf("xds: version of %s: %w", e.name, err)
	}
	return v, nil
}

// returnedAfter is what w's proxy knows once it has the answer. For a
// SotW watch it is a copy, for the stream server drops a SotW answer that
// a newer request of its type overtakes, and the subscription must then
// keep what it had. A Delta answer is always sent before the stream's next
// request is taken, so a Delta watch's map is updated in place; the stream
// reads it only after that request's watch is closed, under mu.
func returnedAfter(w *cacheWatch, sent []*entry, removed []string) map[string]string {
	out := w.sub.ReturnedResources()
	if w.delta == nil || out == nil {
		out = maps.Clone(out)
		if out == nil {
			out = make(map[string]string, len(sent))
		}
	}
	for _, e := range sent {
		// Errors were met in diffLocked already: versions are memoised.
		out[e.name], _ = w.versionOf(e)
	}
	for _, name := range removed {
		delete(out, name)
	}
	return out
}

// sotwResponse is a SotW answer; its resources are marshalled once per
// version however many streams it goes to.
type sotwResponse struct {
	req       *cachev3.Request
	version   string
	resources []*entry
	returned  map[string]string
	rewarms   []string // see ads.Rewarming
	built     atomic.Pointer[discoveryv3.DiscoveryResponse]
}

var _ cachev3.Response = (*sotwResponse)(nil)

func (r *sotwResponse) GetDiscoveryResponse() (*discoveryv3.DiscoveryResponse, error) {
	if out := r.built.Load(); out != nil {
		return out, nil
	}
	out := &discoveryv3.DiscoveryResponse{
		VersionInfo: r.version,
		TypeUrl:     r.req.GetTypeUrl(),
		Resources:   make([]*anypb.Any, len(r.resources)),
	}
	for i, e := range r.resources {
		a, err := e.any(out.TypeUrl)
		if err != nil {
			return nil, err
		}
		out.Resources[i] = a
	}
	r.built.Store(out)
	return out, nil
}

func (r *sotwResponse) Rewarms() (string, []string)               { return resourcev3.EndpointType, r.rewarms }
func (r *sotwResponse) GetRequest() *discoveryv3.DiscoveryRequest { return r.req }
func (r *sotwResponse) GetVersion() (string, error)               { return r.version, nil }
func (r *sotwResponse) GetResponseVersion() string                { return r.version }
func (r *sotwResponse) GetReturnedResources() map[string]string   { return r.returned }
func (r *sotwResponse) GetContext() context.Context               { return context.Background() }

// deltaResponse is a Delta answer.
type deltaResponse struct {
	req       *cachev3.DeltaRequest
	version   string
	resources []*entry
	removed   []string
	returned  map[string]string
	rewarms   []string // see ads.Rewarming
	built     atomic.Pointer[discoveryv3.DeltaDiscoveryResponse]
}

var _ cachev3.DeltaResponse = (*deltaResponse)(nil)

func (r *deltaResponse) GetDeltaDiscoveryResponse() (*discoveryv3.DeltaDiscoveryResponse, error) {
	if out := r.built.Load(); out != nil {
		return out, nil
	}
	out := &discoveryv3.DeltaDiscoveryResponse{
		SystemVersionInfo: r.version,
		TypeUrl:           r.req.GetTypeUrl(),
		Resources:         make([]*discoveryv3.Resource, len(r.resources)),
		RemovedResources:  r.removed,
	}
	for i, e := range r.resources {
		a, err := e.any(out.TypeUrl)
		if err != nil {
			return nil, err
		}
		v, err := e.hash()
		if err != nil {
			return nil, fmt.Errorf("xds: version of %s: %w", e.name, err)
		}
		out.Resources[i] = &discoveryv3.Resource{Name: e.name, Version: v, Resource: a}
	}
	r.built.Store(out)
	return out, nil
}

func (r *deltaResponse) Rewarms() (string, []string)                         { return resourcev3.EndpointType, r.rewarms }
func (r *deltaResponse) GetDeltaRequest() *discoveryv3.DeltaDiscoveryRequest { return r.req }
func (r *deltaResponse) GetSystemVersion() (string, error)                   { return r.version, nil }
func (r *deltaResponse) GetResponseVersion() string                          { return r.version }
func (r *deltaResponse) GetNextVersionMap() map[string]string                { return r.returned }
func (r *deltaResponse) GetReturnedResources() map[string]string             { return r.returned }
func (r *deltaResponse) GetContext() context.Context                         { return context.Background() }
