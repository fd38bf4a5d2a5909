package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"time"
)

// Subcommands.
const (
	cmdProxyStatus    = "proxy-status"
	cmdRemoteClusters = "remote-clusters"
	cmdTrustBundle    = "trust-bundle"
	cmdIstioConfig    = "istio-config"
	cmdConfigStatus   = "config-status"
	cmdRemoteSecret   = "create-remote-secret"
	cmdExplain        = "explain"
	cmdVersion        = "version"
)

// Output formats.
const (
	outputTable = "table"
	outputJSON  = "json"
	outputPEM   = "pem"
)

// Options is a parsed command line.
type Options struct {
	// Command is the subcommand: one of the cmd* constants.
	Command string
	// Hub is the address of a hub's xDS port, which serves CSDS.
	Hub string
	// HubAuth, when its token is set, makes the call to Hub over TLS
	// with the token: the hub's authenticated port.
	HubAuth hubAuth
	// Monitoring is the address (or http:// URL) of a hub's monitoring port.
	Monitoring string
	// Output is outputTable or outputJSON.
	Output string
	// Proxy, for proxy-status, selects one proxy by name or node ID.
	Proxy string
	// Object, for istio-config and config-status, selects one object:
	// KIND/NAMESPACE/NAME.
	Object string
	// ExplainHost, for explain, is HOST[:PORT]; ExplainSubset a subset.
	ExplainHost, ExplainSubset string
	// FleetVersions, for version, asks the hub at Monitoring for every
	// replica's version (set when --monitoring is given).
	FleetVersions bool
	// Timeout bounds each call to the hub.
	Timeout time.Duration
	// RemoteSecret holds the flags of create-remote-secret.
	RemoteSecret remoteSecretOptions
}

// DefaultOptions returns the defaults: the hub's ports are istiod's.
func DefaultOptions() Options {
	return Options{
		Hub:        "localhost:15010",
		Monitoring: "localhost:15014",
		Output:     outputTable,
		// Long enough for the CSDS answer of a large fleet, short enough
		// that a dead hub does not hang an on-call shell.
		Timeout:      30 * time.Second,
		RemoteSecret: defaultRemoteSecretOptions(),
	}
}

const usage = `usage:
  meshfedctl proxy-status [--hub ADDR] [-o table|json] [PROXY]
  meshfedctl remote-clusters [--monitoring ADDR] [-o table|json]
  meshfedctl trust-bundle [--monitoring ADDR] [-o table|json|pem]
  meshfedctl istio-config [--monitoring ADDR] [-o table|json] [KIND/NAMESPACE/NAME]
  meshfedctl config-status [--monitoring ADDR] [-o table|json] [KIND/NAMESPACE/NAME]
  meshfedctl explain [--monitoring ADDR] [-o table|json] [--subset NAME] PROXY HOST[:PORT]
  meshfedctl version [--monitoring ADDR] [-o table|json]
  meshfedctl create-remote-secret --name CLUSTER_ID [--kubeconfig PATH] [--context CTX]
      [--service-account meshfed-reader] [--sa-namespace istio-system] [--token-ttl 720h]
      [--secret-namespace istio-system] [--apply-to CONFIG_KUBECONFIG [--rotate]]
`

// monitoringToken adds the flags of the token sent to the monitoring
// port's /debug documents.
func monitoringToken(fs *flag.FlagSet, opts *Options) {
	fs.StringVar(&opts.HubAuth.Token, "token", "", "Kubernetes token of the config cluster sent to the monitoring port (Authorization: Bearer); its user needs get on fleet.meshfed.io (the hub chart's ClusterRole meshfed-fleet-reader)")
	fs.StringVar(&opts.HubAuth.TokenFile, "token-file", "", "file holding the token for --token")
	fs.BoolVar(&opts.HubAuth.Kubeconfig, "kubeconfig-token", false, "send the credentials of the kubeconfig's current user (its token, token file or exec plugin; $KUBECONFIG or ~/.kube/config) instead of --token")
}

// parseArgs parses args (without the program name). Flags may come before
// or after PROXY. It returns flag.ErrHelp after printing help to stderr.
func parseArgs(args []string, stderr io.Writer) (Options, error) {
	opts := DefaultOptions()
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return opts, errors.New("no command")
	}
	opts.Command = args[0]
	fs := flag.NewFlagSet("meshfedctl "+opts.Command, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usage, "\nflags:\n")
		fs.PrintDefaults()
	}
	fs.StringVar(&opts.Output, "o", opts.Output, "output format: table or json")
	fs.StringVar(&opts.Output, "output", opts.Output, "output format: table or json")
	fs.DurationVar(&opts.Timeout, "timeout", opts.Timeout, "timeout of each call to the hub")
	var positional []string
	switch opts.Command {
	case cmdProxyStatus:
		fs.StringVar(&opts.Hub, "hub", opts.Hub, "address of a hub's xDS port: the plaintext one, or with --token or --token-file the authenticated one (15012)")
		fs.StringVar(&opts.HubAuth.Token, "token", "", "Kubernetes token sent to the hub's authenticated port (as istioctl proxy-status --xds-address does): a service account's of the config cluster")
		fs.StringVar(&opts.HubAuth.TokenFile, "token-file", "", "file holding the token for --token")
		fs.StringVar(&opts.HubAuth.CAFile, "ca-file", "", "PEM roots that verify the hub's authenticated port (meshfedctl trust-bundle -o pem); default the system's")
		fs.StringVar(&opts.HubAuth.ServerName, "server-name", "", "name checked in the hub's certificate (default the host of --hub)")
	case cmdRemoteClusters, cmdTrustBundle, cmdIstioConfig, cmdConfigStatus:
		fs.StringVar(&opts.Monitoring, "monitoring", opts.Monitoring, "address of a hub's monitoring port")
		monitoringToken(fs, &opts)
	case cmdExplain:
		fs.StringVar(&opts.Monitoring, "monitoring", opts.Monitoring, "address of a hub's monitoring port")
		fs.StringVar(&opts.ExplainSubset, "subset", "", "a DestinationRule subset of the host")
		monitoringToken(fs, &opts)
	case cmdVersion:
		fs.Func("monitoring", "address of a hub's monitoring port: also list every replica's version", func(v string) error {
			opts.Monitoring, opts.FleetVersions = v, true
			return nil
		})
		monitoringToken(fs, &opts)
	case cmdRemoteSecret:
		rs := &opts.RemoteSecret
		fs.StringVar(&rs.Name, "name", "", "cluster ID of the workload cluster (the secret's data key)")
		fs.StringVar(&rs.Kubeconfig, "kubeconfig", "", "kubeconfig of the workload cluster (default: the usual loading rules)")
		fs.StringVar(&rs.Context, "context", "", "kubeconfig context (default: current)")
		fs.StringVar(&rs.ServiceAccount, "service-account", rs.ServiceAccount, "the hub's reader service account in the workload cluster")
		fs.StringVar(&rs.SANamespace, "sa-namespace", rs.SANamespace, "namespace of the reader service account")
		fs.DurationVar(&rs.TokenTTL, "token-ttl", rs.TokenTTL, "lifetime of the reader token")
		fs.StringVar(&rs.SecretNamespace, "secret-namespace", rs.SecretNamespace, "namespace of remote secrets in the config cluster")
		fs.StringVar(&rs.ApplyTo, "apply-to", "", "kubeconfig of the config cluster: write the secret there instead of printing it")
		fs.BoolVar(&rs.Rotate, "rotate", false, "replace the token of the existing secret (with --apply-to)")
	case "help", "-h", "--help":
		fmt.Fprint(stderr, usage)
		return opts, flag.ErrHelp
	default:
		fmt.Fprint(stderr, usage)
		return opts, fmt.Errorf("unknown command %q", opts.Command)
	}
	rest := args[1:]
	for {
		if err := fs.Parse(rest); err != nil {
			return opts, err
		}
		if fs.NArg() == 0 {
			break
		}
		positional = append(positional, fs.Arg(0))
		rest = fs.Args()[1:]
	}
	if opts.Output != outputTable && opts.Output != outputJSON && !(opts.Command == cmdTrustBundle && opts.Output == outputPEM) {
		return opts, fmt.Errorf("-o %q: want table or json", opts.Output)
	}
	switch {
	case opts.Command == cmdProxyStatus && len(positional) == 1:
		opts.Proxy = positional[0]
	case (opts.Command == cmdIstioConfig || opts.Command == cmdConfigStatus) && len(positional) == 1:
		opts.Object = positional[0]
	case opts.Command == cmdExplain && len(positional) == 2:
		opts.Proxy, opts.ExplainHost = positional[0], positional[1]
	case opts.Command == cmdExplain:
		return opts, fmt.Errorf("explain: want PROXY HOST[:PORT], got %q", positional)
	case len(positional) > 0:
		return opts, fmt.Errorf("%s: unexpected arguments %q", opts.Command, positional)
	case opts.Command == cmdRemoteSecret && opts.RemoteSecret.Name == "":
		return opts, errors.New("create-remote-secret: --name is required")
	}
	return opts, nil
}
