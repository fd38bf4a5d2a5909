package framework

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/anypb"
)

// LoadClientOptions describe one LoadClient: one proxy's ADS stream.
type LoadClientOptions struct {
	// Node is the proxy's identity, sent on the first request. Required.
	Node *corev3.Node
	// Delta selects the incremental protocol (DeltaAggregatedResources);
	// otherwise the stream is state of the world.
	Delta bool
	// Names are the load assignments (EDS cluster names) the proxy
	// subscribes to, as a proxyless gRPC client that dials those services
	// does. Required.
	Names []string
	// Window, when set, fixes the HTTP/2 flow-control windows of the
	// client's connection and stream at that many bytes (at least 64 KiB),
	// as pilot-agent dials its control plane with 1 MiB windows (Istio's
	// pilot/pkg/grpc ClientOptions). Zero keeps grpc-go's defaults, which
	// estimate the bandwidth with a ping after data arrives, as a
	// proxyless gRPC client does: one more ping for the control plane to
	// read and answer per response.
	Window int32
	// OnAssignment, when set, is called for every assignment received,
	// from the stream's receiving goroutine, after the response was
	// ACKed: the name, the endpoints it holds that a proxy would send
	// traffic to (health HEALTHY or UNKNOWN), and when the response was
	// read. It must not block.
	OnAssignment func(name string, healthy int, received time.Time)
}

// LoadClient is a raw ADS stream of one proxy, lighter than ADSWatcher for
// benchmarks that hold thousands of proxies in one process: it ACKs every
// response, keeps per subscribed name only the latest healthy-endpoint
// count, and hands assignments to a callback instead of a buffer. Each
// client has its own connection, as separate proxies do. A stream that
// fails (refused by a control plane's admission or rate limit, or cut) is
// opened again after a backoff of 100 ms doubling to 2 s, as Envoy and
// grpc-go retry, until the client is closed.
type LoadClient struct {
	opts   LoadClientOptions
	conn   *grpc.ClientConn
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex // guards healthy, err and retries
	healthy map[string]int
	err     error // the last stream's failure
	retries int
}

// DialLoadClient opens the stream to addr (plaintext) and subscribes. ctx
// bounds the stream's life; Close ends it earlier.
func DialLoadClient(ctx context.Context, addr string, opts LoadClientOptions) (*LoadClient, error) {
	if opts.Node.GetId() == "" || len(opts.Names) == 0 {
		return nil, errors.New("framework: a load client needs a node ID and names")
	}
	dial := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64 << 20))}
	if opts.Window > 0 {
		dial = append(dial, grpc.WithInitialWindowSize(opts.Window), grpc.WithInitialConnWindowSize(opts.Window))
	}
	conn, err := grpc.NewClient(addr, dial...)
	if err != nil {
		return nil, fmt.Errorf("framework: load client: dialing %s: %w", addr, err)
	}
	sctx, cancel := context.WithCancel(ctx)
	c := &LoadClient{opts: opts, conn: conn, cancel: cancel, done: make(chan struct{}), healthy: map[string]int{}}
	ads := discoveryv3.NewAggregatedDiscoveryServiceClient(conn)
	run := c.runSotW
	if opts.Delta {
		run = c.runDelta
	}
	go func() {
		defer close(c.done)
		backoff := 100 * time.Millisecond
		for {
			err := run(sctx, ads)
			if sctx.Err() != nil {
				return
			}
			c.mu.Lock()
			c.err, c.retries = err, c.retries+1
			c.mu.Unlock()
			select {
			case <-sctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 2*time.Second)
		}
	}()
	return c, nil
}

func (c *LoadClient) runSotW(ctx context.Context, ads discoveryv3.AggregatedDiscoveryServiceClient) error {
	stream, err := ads.StreamAggregatedResources(ctx)
	if err != nil {
		return fmt.Errorf("opening stream: %w", err)
	}
	req := &discoveryv3.DiscoveryRequest{Node: c.opts.Node, TypeUrl: resourcev3.EndpointType, ResourceNames: c.opts.Names}
	if err := stream.Send(req); err != nil {
		return fmt.Errorf("subscribing: %w", err)
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			return fmt.Errorf("stream ended: %w", err)
		}
		received := time.Now()
		ack := &discoveryv3.DiscoveryRequest{
			TypeUrl: resp.GetTypeUrl(), ResourceNames: c.opts.Names,
			VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce(),
		}
		if err := stream.Send(ack); err != nil {
			return fmt.Errorf("ACK: %w", err)
		}
		for _, res := range resp.GetResources() {
			if err := c.record(res, received); err != nil {
				return err
			}
		}
	}
}

func (c *LoadClient) runDelta(ctx context.Context, ads discoveryv3.AggregatedDiscoveryServiceClient) error {
	stream, err := ads.DeltaAggregatedResources(ctx)
	if err != nil {
		return fmt.Errorf("opening delta stream: %w", err)
	}
	req := &discoveryv3.DeltaDiscoveryRequest{Node: c.opts.Node, TypeUrl: resourcev3.EndpointType, ResourceNamesSubscribe: c.opts.Names}
	if err := stream.Send(req); err != nil {
		return fmt.Errorf("subscribing: %w", err)
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			return fmt.Errorf("delta stream ended: %w", err)
		}
		received := time.Now()
		if err := stream.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resp.GetTypeUrl(), ResponseNonce: resp.GetNonce()}); err != nil {
			return fmt.Errorf("ACK: %w", err)
		}
		for _, res := range resp.GetResources() {
			if err := c.record(res.GetResource(), received); err != nil {
				return err
			}
		}
		for _, name := range resp.GetRemovedResources() {
			c.set(name, 0, received)
		}
	}
}

// record reads one assignment and counts its healthy endpoints.
func (c *LoadClient) record(res *anypb.Any, received time.Time) error {
	if res == nil {
		return nil
	}
	var cla endpointv3.ClusterLoadAssignment
	if err := res.UnmarshalTo(&cla); err != nil {
		return fmt.Errorf("decoding %s: %w", res.GetTypeUrl(), err)
	}
	n := 0
	for _, loc := range cla.GetEndpoints() {
		for _, lb := range loc.GetLbEndpoints() {
			switch lb.GetHealthStatus() {
			case corev3.HealthStatus_HEALTHY, corev3.HealthStatus_UNKNOWN:
				n++
			}
		}
	}
	c.set(cla.GetClusterName(), n, received)
	return nil
}

func (c *LoadClient) set(name string, healthy int, received time.Time) {
	c.mu.Lock()
	c.healthy[name] = healthy
	c.mu.Unlock()
	if c.opts.OnAssignment != nil {
		c.opts.OnAssignment(name, healthy, received)
	}
}

// Healthy returns the healthy-endpoint count of the latest assignment of
// name, and whether one was received.
func (c *LoadClient) Healthy(name string) (int, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.healthy[name]
	return n, ok
}

// Received counts the subscribed names an assignment was received for.
func (c *LoadClient) Received() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.healthy)
}

// Retries returns how many of the client's streams failed and why the
// last one did (nil if none did).
func (c *LoadClient) Retries() (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.retries, c.err
}

// Close ends the stream and the connection and waits for the receiver.
func (c *LoadClient) Close() error {
	c.cancel()
	<-c.done
	return c.conn.Close()
}
