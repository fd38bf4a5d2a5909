package main

import (
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
	outputYAML  = "yaml"
	outputPEM   = "pem"
)

// Options is a parsed command line.
type Options struct {
	// Command is the subcommand: one of the cmd* constants.
	Command string
	// Hub is the address of a hub's xDS port, which serves CSDS; empty:
	// proxy-status reads the monitoring port's /debug/proxystatusz.
	Hub string
	// HubAuth, when its token is set, makes the call to Hub over TLS
	// with the token: the hub's authenticated port.
	HubAuth hubAuth
	// Monitoring is the address (or http:// URL) of a hub's monitoring
	// port; empty: a Ready hub Pod found through Kube, port-forwarded.
	Monitoring string
	// Kube locates the hub's cluster when no address is given.
	Kube kubeconfigFlags
	// Output is outputTable or outputJSON (outputYAML is turned into
	// JSON converted on the way out), or outputPEM for trust-bundle.
	Output string
	// Proxy, for proxy-status, selects one proxy by name or node ID.
	Proxy string
	// Object, for istio-config and config-status, selects one object:
	// KIND/NAMESPACE/NAME.
	Object string
	// ExplainHost, for explain, is HOST[:PORT]; ExplainSubset a subset.
	ExplainHost, ExplainSubset string
	// FleetVersions, for version, asks the hub for every replica's
	// version (with --monitoring, or a hub found through the kubeconfig).
	FleetVersions bool
	// Timeout bounds each call to the hub.
	Timeout time.Duration
	// RemoteSecret holds the flags of create-remote-secret.
	RemoteSecret remoteSecretOptions
}

// DefaultOptions returns the defaults: the hub's ports are istiod's.
func DefaultOptions() Options {
	return Options{
		Kube:   kubeconfigFlags{Namespace: "istio-system"},
		Output: outputTable,
		// Long enough for the CSDS answer of a large fleet, short enough
		// that a dead hub does not hang an on-call shell.
		Timeout:      30 * time.Second,
		RemoteSecret: defaultRemoteSecretOptions(),
	}
}
