package bench

import (
	"context"
	"net/netip"
	"slices"
	"time"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/meshfed/meshfed/e2e/framework"
)

// readyFlipper churns one EndpointSlice the way the convergence benchmarks
// do: each flip toggles the ready (and serving) condition of one endpoint
// of the changed workload, and says which assignment a client must then
// hold. It keeps the desired ready state of every endpoint it was given.
type readyFlipper struct {
	changed *framework.Workload
	flipped netip.AddrPort
	ready   map[netip.AddrPort]bool
}

// newReadyFlipper flips the first replica of changed; workloads (changed
// among them) are every workload behind the watched service, all ready.
func newReadyFlipper(changed *framework.Workload, workloads ...*framework.Workload) *readyFlipper {
	f := &readyFlipper{
		changed: changed,
		flipped: netip.AddrPortFrom(changed.Replicas()[0].PodIP, changed.TargetPort()),
		ready:   map[netip.AddrPort]bool{},
	}
	for _, w := range workloads {
		for _, rep := range w.Replicas() {
			f.ready[netip.AddrPortFrom(rep.PodIP, w.TargetPort())] = true
		}
	}
	return f
}

// want is the check of an assignment holding exactly the ready endpoints.
func (f *readyFlipper) want() func(*endpointv3.ClusterLoadAssignment) error {
	return wantReady(f.ready)
}

// flip writes the next change. It returns the time just before the
// apiserver Update (the start of the convergence measurement), how long
// the Update took, and the check of the assignment that change implies.
func (f *readyFlipper) flip(ctx context.Context) (start time.Time, write time.Duration,
	check func(*endpointv3.ClusterLoadAssignment) error, err error) {
	f.ready[f.flipped] = !f.ready[f.flipped]
	want := f.ready[f.flipped]
	addr := f.flipped.Addr().String()
	start = time.Now()
	err = f.changed.UpdateEndpointSlice(ctx, func(es *discoveryv1.EndpointSlice) {
		for i := range es.Endpoints {
			if slices.Contains(es.Endpoints[i].Addresses, addr) {
				r, s := want, want
				es.Endpoints[i].Conditions.Ready = &r
				es.Endpoints[i].Conditions.Serving = &s
			}
		}
	})
	return start, time.Since(start), f.want(), err
}

// wantsReady reports the state the last flip set, for error messages.
func (f *readyFlipper) wantsReady() bool { return f.ready[f.flipped] }
