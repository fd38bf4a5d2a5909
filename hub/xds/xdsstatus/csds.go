package xdsstatus

import (
	"context"
	"errors"
	"fmt"
	"io"

	statusv3 "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/meshfed/meshfed/pkg/proxystatus"
	"github.com/meshfed/meshfed/pkg/proxystatus/csds"
)

// StatusSource is what CSDS reads proxy status from (Options.StatusSource):
// in the hub, the fleet-wide view (hub/fleetstatus.Fleet); by default this
// server's own Tracker. The xDS server knows nothing of where the
// records come from. All may be called concurrently and must not block
// for long; it returns records the caller may keep.
type StatusSource interface {
	All() []proxystatus.Record
}

// CSDS serves envoy.service.status.v3.ClientStatusDiscoveryService
// from a StatusSource. The wire shape is package proxystatus/csds's:
// one ClientConfig per proxy, one GenericXdsConfig per type, the serving
// replica in node metadata MESHFED_REPLICA.
type CSDS struct {
	statusv3.UnimplementedClientStatusDiscoveryServiceServer

	src StatusSource // set once, at New
}

func NewCSDS(src StatusSource) *CSDS { return &CSDS{src: src} }

func (c *CSDS) answer(req *statusv3.ClientStatusRequest) (*statusv3.ClientStatusResponse, error) {
	resp, err := csds.Response(req, c.src.All())
	if errors.Is(err, csds.ErrInvalidMatcher) {
		return nil, grpcstatus.Error(codes.InvalidArgument, err.Error())
	}
	if err != nil {
		return nil, grpcstatus.Error(codes.Internal, err.Error())
	}
	return resp, nil
}

// FetchClientStatus answers one request.
func (c *CSDS) FetchClientStatus(_ context.Context, req *statusv3.ClientStatusRequest) (*statusv3.ClientStatusResponse, error) {
	return c.answer(req)
}

// StreamClientStatus answers each request on the stream.
func (c *CSDS) StreamClientStatus(stream statusv3.ClientStatusDiscoveryService_StreamClientStatusServer) error {
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("xds: csds: %w", err)
		}
		resp, err := c.answer(req)
		if err != nil {
			return err
		}
		if err := stream.Send(resp); err != nil {
			return fmt.Errorf("xds: csds: %w", err)
		}
	}
}
