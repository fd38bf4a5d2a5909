package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"

	statusv3 "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/grpc"

	"github.com/meshfed/meshfed/pkg/debugdoc"
	"github.com/meshfed/meshfed/pkg/proxystatus"
	"github.com/meshfed/meshfed/pkg/proxystatus/csds"
	"github.com/meshfed/meshfed/pkg/xdsnode"
)

// errUnknownProxy is returned when PROXY names no connected proxy.
var errUnknownProxy = errors.New("unknown proxy")

// maxResponseBytes bounds a CSDS answer: a fleet of 100k proxies is some
// 100 MB of ClientConfigs; gRPC's default of 4 MB is some 4k proxies.
const maxResponseBytes = 256 << 20

// run carries out opts, writing its output to stdout.
func run(ctx context.Context, opts Options, stdout io.Writer) error {
	switch opts.Command {
	case cmdProxyStatus:
		return proxyStatus(ctx, opts, stdout)
	case cmdRemoteClusters:
		return remoteClusters(ctx, opts, stdout)
	case cmdTrustBundle:
		return trustBundle(ctx, opts, stdout)
	case cmdIstioConfig:
		return istioConfig(ctx, opts, stdout)
	case cmdConfigStatus:
		return configStatus(ctx, opts, stdout)
	case cmdRemoteSecret:
		return createRemoteSecret(ctx, opts.RemoteSecret, stdout)
	case cmdExplain:
		return explain(ctx, opts, stdout)
	case cmdVersion:
		return printVersion(ctx, opts, stdout)
	}
	return fmt.Errorf("unknown command %q", opts.Command)
}

func proxyStatus(ctx context.Context, opts Options, stdout io.Writer) error {
	recs, err := fetchRecords(ctx, opts, proxyMatchers(opts.Proxy))
	if err != nil {
		return err
	}
	if opts.Proxy != "" {
		recs = selectProxy(recs, opts.Proxy)
		if len(recs) == 0 {
			return fmt.Errorf("%w %q: no proxy of that name or node ID is connected to the fleet of hub %s",
				errUnknownProxy, opts.Proxy, cmp.Or(opts.Hub, opts.Monitoring))
		}
	}
	switch {
	case opts.Output == outputJSON:
		return proxystatus.WriteJSON(stdout, recs)
	case opts.Proxy != "":
		proxystatus.Sort(recs)
		for i, r := range recs {
			if i > 0 {
				fmt.Fprintln(stdout)
			}
			if err := proxystatus.WriteDetail(stdout, r); err != nil {
				return err
			}
		}
		return nil
	default:
		return proxystatus.WriteTable(stdout, recs)
	}
}

// proxyMatchers asks the hub for the proxies PROXY may mean: the node ID
// itself, or an Istio node ID whose name field is PROXY.
func proxyMatchers(proxy string) []*matcherv3.NodeMatcher {
	if proxy == "" {
		return nil
	}
	return []*matcherv3.NodeMatcher{
		{NodeId: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: proxy}}},
		{NodeId: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Contains{Contains: xdsnode.NameField(proxy)}}},
	}
}

// selectProxy keeps the records whose node ID or name is proxy.
func selectProxy(recs []proxystatus.Record, proxy string) []proxystatus.Record {
	var out []proxystatus.Record
	for _, r := range recs {
		if r.Proxy == proxy || r.Name == proxy {
			out = append(out, r)
		}
	}
	return out
}

func fetchRecords(ctx context.Context, opts Options, ms []*matcherv3.NodeMatcher) ([]proxystatus.Record, error) {
	if opts.Hub == "" {
		var doc proxystatus.JSONDocument
		if err := getDoc(ctx, opts, debugdoc.ProxyStatusPath, &doc); err != nil {
			return nil, err
		}
		return doc.Proxies, nil
	}
	dial, err := opts.HubAuth.dialOptions()
	if err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient(opts.Hub, append(dial, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxResponseBytes)))...)
	if err != nil {
		return nil, fmt.Errorf("hub %s: %w", opts.Hub, err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	resp, err := statusv3.NewClientStatusDiscoveryServiceClient(conn).FetchClientStatus(ctx,
		&statusv3.ClientStatusRequest{NodeMatchers: ms, ExcludeResourceContents: true})
	if err != nil {
		return nil, fmt.Errorf("hub %s: client status: %w", opts.Hub, err)
	}
	recs := make([]proxystatus.Record, 0, len(resp.GetConfig()))
	for _, cc := range resp.GetConfig() {
		r, err := csds.Record(cc)
		if err != nil {
			return nil, fmt.Errorf("hub %s: %w", opts.Hub, err)
		}
		recs = append(recs, r)
	}
	return recs, nil
}
