package framework

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The echo service every workload replica serves. It is declared by hand
// (no protoc): one unary method whose request and response are
// google.protobuf.StringValue; the response is the server's identity.
const (
	// EchoServiceName is the fully qualified gRPC service name.
	EchoServiceName = "meshfed.e2e.Echo"
	// EchoMethod is the full method name clients invoke.
	EchoMethod = "/" + EchoServiceName + "/Echo"
)

// echoHandler is what the hand-written service descriptor dispatches to.
type echoHandler interface {
	echo(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error)
}

func newEchoServiceDesc() *grpc.ServiceDesc {
	return &grpc.ServiceDesc{
		ServiceName: EchoServiceName,
		HandlerType: (*echoHandler)(nil),
		Methods: []grpc.MethodDesc{{
			MethodName: "Echo",
			Handler: func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
				in := new(wrapperspb.StringValue)
				if err := dec(in); err != nil {
					return nil, err
				}
				h := srv.(echoHandler)
				if interceptor == nil {
					return h.echo(ctx, in)
				}
				info := &grpc.UnaryServerInfo{Server: srv, FullMethod: EchoMethod}
				return interceptor(ctx, in, info, func(ctx context.Context, req any) (any, error) {
					return h.echo(ctx, req.(*wrapperspb.StringValue))
				})
			},
		}},
		Metadata: "meshfed/e2e/echo",
	}
}

// CallEcho invokes the echo method once over cc and returns the identity of
// the server that answered.
func CallEcho(ctx context.Context, cc grpc.ClientConnInterface, opts ...grpc.CallOption) (string, error) {
	out := new(wrapperspb.StringValue)
	if err := cc.Invoke(ctx, EchoMethod, wrapperspb.String("ping"), out, opts...); err != nil {
		return "", err
	}
	return out.GetValue(), nil
}

// EchoServer is a real gRPC server answering the echo service with a fixed
// identity, conventionally "<cluster>/<pod>".
type EchoServer struct {
	identity string
	addr     netip.AddrPort
	srv      grpcServer
	served   atomic.Int64
	done     chan struct{}
	stopOnce sync.Once

	// serving is closed when an xDS server first serves; nil for a plain
	// server, which serves at once.
	serving chan struct{}
	modeMu  sync.Mutex
	modeErr error  // last serving-mode error of an xDS server
	peerID  string // client SPIFFE ID of the last call
	// peerIssuers counts calls by the issuer of the client certificate.
	peerIssuers map[string]int
}

// grpcServer is what EchoServer needs of *grpc.Server and of grpc-go's
// xDS-enabled *xds.GRPCServer.
type grpcServer interface {
	RegisterService(*grpc.ServiceDesc, any)
	Serve(net.Listener) error
	Stop()
	GracefulStop()
}

// StartEchoServer listens on addr (host:port; port 0 picks one) and serves
// the echo service until Stop.
func StartEchoServer(addr, identity string) (*EchoServer, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("framework: echo server %s: %w", identity, err)
	}
	ap, err := netip.ParseAddrPort(l.Addr().String())
	if err != nil {
		_ = l.Close()
		return nil, fmt.Errorf("framework: echo server address: %w", err)
	}
	gs := grpc.NewServer()
	s := &EchoServer{identity: identity, addr: ap, srv: gs, done: make(chan struct{})}
	gs.RegisterService(newEchoServiceDesc(), s)
	go func() {
		defer close(s.done)
		_ = s.srv.Serve(l)
	}()
	return s, nil
}

func (s *EchoServer) echo(ctx context.Context, _ *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
	s.served.Add(1)
	var id, issuer string
	if p, ok := peer.FromContext(ctx); ok {
		id, issuer = peerOf(p.AuthInfo)
	}
	s.modeMu.Lock()
	s.peerID = id
	if issuer != "" {
		if s.peerIssuers == nil {
			s.peerIssuers = map[string]int{}
		}
		s.peerIssuers[issuer]++
	}
	s.modeMu.Unlock()
	return wrapperspb.String(s.identity), nil
}

// Identity returns what the server answers.
func (s *EchoServer) Identity() string { return s.identity }

// Addr returns the address the server listens on.
func (s *EchoServer) Addr() netip.AddrPort { return s.addr }

// Served returns how many calls the server has answered.
func (s *EchoServer) Served() int64 { return s.served.Load() }

// Stop stops the server: in-flight calls get up to a second to finish,
// then connections are closed. It is idempotent and waits for the server.
func (s *EchoServer) Stop() {
	s.stopOnce.Do(func() {
		graceful := make(chan struct{})
		go func() {
			s.srv.GracefulStop()
			close(graceful)
		}()
		select {
		case <-graceful:
		case <-time.After(time.Second):
			s.srv.Stop()
			<-graceful
		}
		<-s.done
	})
}
