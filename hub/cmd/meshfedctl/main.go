// Command meshfedctl inspects a meshfed fleet through any hub replica.
//
//	meshfedctl proxy-status [PROXY]
//	meshfedctl remote-clusters
//	meshfedctl trust-bundle [-o pem]
//	meshfedctl istio-config [KIND/NS/NAME]
//	meshfedctl config-status [KIND/NS/NAME]
//	meshfedctl explain [--subset NAME] PROXY HOST[:PORT]
//	meshfedctl version [--client]
//	meshfedctl create-remote-secret --name CLUSTER_ID [--apply-to CONFIG_KUBECONFIG]
//	meshfedctl completion bash|zsh|fish|powershell
//
// Every command takes -o table|json|yaml and --help. Like istioctl, it finds
// the hub through the kubeconfig (--kubeconfig, --context, -n): a Ready Pod
// of the hub chart, its monitoring port forwarded through the apiserver,
// the kubeconfig's user sent as the token; --monitoring ADDR (and, for
// proxy-status, --hub ADDR: CSDS on the xDS port) name a hub outside the
// cluster instead.
//
// proxy-status reads the fleet-wide proxy status from the monitoring port's
// /debug/proxystatusz, or with --hub from the hub's CSDS service
// (envoy.service.status.v3, on the plaintext xDS port, or with a token over
// TLS on the authenticated port, where the config cluster reviews the
// token), and prints it with
// the columns of `istioctl proxy-status`: NAME CLUSTER CDS LDS EDS RDS ECDS
// HUB VERSION, where HUB is the replica serving the proxy. With PROXY, a
// name "<pod>.<ns>" or a node ID, it prints that proxy's per-type detail,
// NACK messages included, and fails if no such proxy is connected. -o json
// writes the document described in package proxystatus:
// {"proxies": [Record, …]}.
//
// remote-clusters reads the hub's /debug/registryz and /debug/federationz
// (the latter optional) from the monitoring port and prints CLUSTER SECRET
// STATE SINCE STALE SCOPE OWNERS SERVICES ENDPOINTS SPOKE ERROR, where SINCE is
// when the cluster entered its state, SCOPE its own discovery selector,
// and STALE its stale-endpoint policy
// (with when its endpoints were dropped under it), then any rejected
// secrets. -o json writes
//
//	{
//	  "replica": "hub-0",
//	  "clusters": [{"cluster": "cluster-1", "secret": "istio-system/remote-1",
//	                "state": "synced", "owners": ["hub-1"], "services": 3,
//	                "endpoints": 12, "error": "", "since": "2026-12-03T09:00:00Z",
//	                "stalePolicy": "keep"}],
//	  "secretErrors": [{"secret": "istio-system/bad", "error": "…"}]
//	}
//
// where "owners" is left out when unknown: the hub has no
// /debug/federationz, or no replica owns the cluster; "endpointsDropped"
// appears once a drop-after policy dropped the cluster's endpoints.
//
// istio-config reads /debug/configz and prints every Istio object the hub
// read (VirtualService, DestinationRule, ServiceEntry, Sidecar,
// PeerAuthentication, AuthorizationPolicy): KIND NAMESPACE NAME GENERATION
// STATE (applied, rejected, shadowed) and a one-line DETAIL; with
// KIND/NS/NAME (kind case-insensitive, or vs / dr / se / pa / ap) one
// object in full: its errors by field path, the object that shadows it,
// the notes on what a proxy kind does not get. -o json writes the debugdoc.Configz document (or the one
// object).
//
// config-status reads /debug/configstatusz and prints, for every object,
// how many proxies of the fleet hold its newest generation: KIND NAMESPACE
// NAME GEN PROXIES SYNCED STALE NACKED and a DETAIL ("deleted", why the
// hub refuses the object, or where the proxies lacking it are: "STALE in
// cluster-3 (2)"), then each replica's config epoch. With KIND/NS/NAME
// (as for istio-config) it asks the hub for that object alone and prints
// its summary line, its counts by cluster and by replica, and the proxies
// that do not hold it, with why; it fails if the hub knows no such
// object. -o json writes the proxystatus.ConfigStatusz document
//
//	{
//	  "objects": [{"kind": "VirtualService", "namespace": "demo", "name": "echo",
//	               "generation": 7, "proxies": 120, "synced": 118, "stale": 2,
//	               "nacked": 0, "clusters": [{"cluster": "cluster-3", "proxies": 40,
//	               "synced": 38, "stale": 2, "nacked": 0}, …],
//	               "replicas": [{"replica": "hub-0", "held": true, "generation": 7,
//	               "epoch": 12, "proxies": 60, "synced": 58}, …]}],
//	  "replicas": [{"replica": "hub-0", "epoch": 12, "objects": 40, "proxies": 60}, …]
//	}
//
// or, with KIND/NS/NAME, the one object, whose "pending" lists the proxies
// not synced: [{"proxy": node ID, "name": "<pod>.<ns>", "cluster",
// "replica", "state": "STALE" or "NACKED", "reason"}, …]. "deleted" and
// "rejected" are left out unless set.//
// explain reads /debug/explainz and prints the endpoints that PROXY (a
// name "<pod>.<ns>" or a node ID, served by any replica) is sent for the
// service HOST (a hostname, or "<name>.<ns>") on PORT (default: its first
// port), in priority order: PRIORITY ADDRESS CLUSTER LOCALITY WEIGHT
// REASON, where REASON says why the endpoint has its priority (its own
// cluster, its region, a failover region, ...), then the endpoints left
// out, with why (not ready, not in the subset, ...). It fails, saying why,
// for an unknown proxy, host, port or subset. -o json writes the
// debugdoc.Explainz document.
//
// version prints meshfedctl's own version, revision and Go version; with
// --monitoring also REPLICA VERSION for every live replica of the fleet, as
// the answering replica's /debug/federationz lists them (each replica
// publishes its version over gossip), and a line naming the builds when
// the fleet runs more than one. -o json writes
//
//	{"client": {"version": "v0.1.0", "revision": "…", "goVersion": "go1.26.8"},
//	 "replicas": [{"replica": "hub-0", "version": "v0.1.0"}, …], "builds": 1}
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ran := false
	root := newRootCommand(func(ctx context.Context, opts Options, stdout io.Writer) error {
		ran = true
		return runCommand(ctx, opts, stdout)
	}, os.Stdout, os.Stderr)
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "meshfedctl:", err)
		if !ran { // the command line, not the hub
			os.Exit(2)
		}
		os.Exit(1)
	}
}
