package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"sigs.k8s.io/yaml"
)

// executor carries out parsed Options: runCommand for the binary, a
// recorder in tests of the command line.
type executor func(ctx context.Context, opts Options, stdout io.Writer) error

// newRootCommand builds meshfedctl's command tree. Every command's flags
// fill one Options, which exec carries out.
func newRootCommand(exec executor, stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "meshfedctl",
		Short: "Inspect a meshfed fleet through any hub replica",
		Long: `meshfedctl inspects a meshfed fleet through any hub replica: the proxies of
every cluster, the remote clusters, the trust bundle, the Istio config and
its rollout, why a proxy gets the endpoints it gets.

Like istioctl, it finds the hub through the kubeconfig when no address is
given: a Ready Pod of the hub chart (label ` + hubPodSelector + `) in
--namespace, its monitoring port forwarded through the apiserver, the
kubeconfig's user sent as the token. --monitoring and --hub name a hub
outside the cluster instead.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)

	type spec struct {
		name, use, short string
		args             cobra.PositionalArgs
		hubFlags         bool // the hub's address and credentials
		outputs          []string
		bind             func(*cobra.Command, *Options)
		positional       func(*Options, []string)
	}
	specs := []spec{
		{name: cmdProxyStatus, use: "proxy-status [PROXY]",
			short: "Every proxy of the fleet and what it holds of each xDS type, as istioctl proxy-status; one proxy in detail",
			args:  cobra.MaximumNArgs(1), hubFlags: true,
			bind: func(c *cobra.Command, o *Options) {
				c.Flags().StringVar(&o.Hub, "hub", "", "address of a hub's xDS port, for its CSDS: the authenticated one (15012) with --token or --token-file, else the plaintext one; default: the monitoring port's /debug/proxystatusz")
				c.Flags().StringVar(&o.HubAuth.CAFile, "ca-file", "", "PEM roots that verify the hub's authenticated port (meshfedctl trust-bundle -o pem); default the system's")
				c.Flags().StringVar(&o.HubAuth.ServerName, "server-name", "", "name checked in the hub's certificate (default the host of --hub)")
			},
			positional: func(o *Options, a []string) { o.Proxy = first(a) }},
		{name: cmdRemoteClusters, use: "remote-clusters",
			short: "The remote clusters: state, owners, services, endpoints, network, spoke",
			args:  cobra.NoArgs, hubFlags: true},
		{name: cmdTrustBundle, use: "trust-bundle",
			short: "The federated trust bundle: every root, its source and retirement",
			args:  cobra.NoArgs, hubFlags: true, outputs: []string{outputPEM}},
		{name: cmdIstioConfig, use: "istio-config [KIND/NAMESPACE/NAME]",
			short: "Every Istio object the hub read, applied, rejected or shadowed; one object with its errors and notes",
			args:  cobra.MaximumNArgs(1), hubFlags: true,
			positional: func(o *Options, a []string) { o.Object = first(a) }},
		{name: cmdConfigStatus, use: "config-status [KIND/NAMESPACE/NAME]",
			short: "How many proxies of the fleet hold each Istio object's newest generation",
			args:  cobra.MaximumNArgs(1), hubFlags: true,
			positional: func(o *Options, a []string) { o.Object = first(a) }},
		{name: cmdExplain, use: "explain PROXY HOST[:PORT]",
			short: "The endpoints a proxy is sent for a service, in priority order, and why",
			args: func(_ *cobra.Command, a []string) error {
				if len(a) != 2 {
					return fmt.Errorf("explain: want PROXY HOST[:PORT], got %q", a)
				}
				return nil
			}, hubFlags: true,
			bind: func(c *cobra.Command, o *Options) {
				c.Flags().StringVar(&o.ExplainSubset, "subset", "", "a DestinationRule subset of the host")
			},
			positional: func(o *Options, a []string) { o.Proxy, o.ExplainHost = a[0], a[1] }},
		{name: cmdVersion, use: "version",
			short: "meshfedctl's version, and every hub replica's",
			args:  cobra.NoArgs, hubFlags: true},
		{name: cmdRemoteSecret, use: "create-remote-secret --name CLUSTER_ID",
			short: "A least-privilege remote secret of a workload cluster, printed or applied to the config cluster",
			args:  cobra.NoArgs,
			bind: func(c *cobra.Command, o *Options) {
				rs := &o.RemoteSecret
				c.Flags().StringVar(&rs.Name, "name", "", "cluster ID of the workload cluster (the secret's data key)")
				c.Flags().StringVar(&rs.Kubeconfig, "kubeconfig", "", "kubeconfig of the workload cluster (default: the usual loading rules)")
				c.Flags().StringVar(&rs.Context, "context", "", "kubeconfig context (default: current)")
				c.Flags().StringVar(&rs.ServiceAccount, "service-account", rs.ServiceAccount, "the hub's reader service account in the workload cluster")
				c.Flags().StringVar(&rs.SANamespace, "sa-namespace", rs.SANamespace, "namespace of the reader service account")
				c.Flags().DurationVar(&rs.TokenTTL, "token-ttl", rs.TokenTTL, "lifetime of the reader token")
				c.Flags().StringVar(&rs.SecretNamespace, "secret-namespace", rs.SecretNamespace, "namespace of remote secrets in the config cluster")
				c.Flags().StringVar(&rs.ApplyTo, "apply-to", "", "kubeconfig of the config cluster: write the secret there instead of printing it")
				c.Flags().BoolVar(&rs.Rotate, "rotate", false, "replace the token of the existing secret (with --apply-to)")
				_ = c.MarkFlagRequired("name")
			}},
	}
	for _, s := range specs {
		opts := DefaultOptions()
		opts.Command = s.name
		c := &cobra.Command{Use: s.use, Short: s.short, Args: s.args}
		outputs := append([]string{outputTable, outputJSON, outputYAML}, s.outputs...)
		if s.name != cmdRemoteSecret {
			c.Flags().StringVarP(&opts.Output, "output", "o", opts.Output, "output format: "+strings.Join(outputs, ", "))
			c.Flags().DurationVar(&opts.Timeout, "timeout", opts.Timeout, "timeout of each call to the hub")
		}
		if s.hubFlags {
			addHubFlags(c, &opts)
		}
		if s.bind != nil {
			s.bind(c, &opts)
		}
		c.RunE = func(c *cobra.Command, args []string) error {
			if s.name != cmdRemoteSecret && !slices.Contains(outputs, opts.Output) {
				return fmt.Errorf("-o %q: want one of %s", opts.Output, strings.Join(outputs, ", "))
			}
			if s.positional != nil {
				s.positional(&opts, args)
			}
			if s.name == cmdVersion {
				opts.FleetVersions = c.Flags().Changed("monitoring") || !c.Flags().Changed("client")
			}
			return exec(c.Context(), opts, c.OutOrStdout())
		}
		if s.name == cmdVersion {
			c.Flags().Bool("client", false, "print meshfedctl's own version only")
		}
		root.AddCommand(c)
	}
	root.AddCommand(&cobra.Command{
		Use: "reference-docs", Hidden: true, Args: cobra.NoArgs,
		Short: "Print the Markdown reference of every command and flag (docs/reference/meshfedctl.md)",
		RunE: func(c *cobra.Command, _ []string) error {
			return writeReference(c.OutOrStdout(), root)
		},
	})
	return root
}

// writeReference writes the Markdown reference of root's commands: each
// visible command's use, summary and flags, as their flag sets say.
func writeReference(w io.Writer, root *cobra.Command) error {
	var b bytes.Buffer
	b.WriteString("# meshfedctl\n\n")
	b.WriteString("<!-- Generated by `make docs` from meshfedctl's own command tree (`meshfedctl reference-docs`); do not edit. -->\n\n")
	b.WriteString(root.Long + "\n")
	for _, c := range root.Commands() {
		if c.Hidden || c.Name() == "help" {
			continue
		}
		fmt.Fprintf(&b, "\n## %s\n\n`meshfedctl %s`: %s\n", c.Name(), c.Use, c.Short)
		if c.Name() == "completion" {
			b.WriteString("\nSubcommands `bash`, `zsh`, `fish`, `powershell` print the completion script of that shell (cobra's).\n")
			continue
		}
		b.WriteString("\n| flag | type | default | |\n|---|---|---|---|\n")
		c.Flags().VisitAll(func(f *pflag.Flag) {
			name := "`--" + f.Name + "`"
			if f.Shorthand != "" {
				name = "`-" + f.Shorthand + "`, " + name
			}
			def := ""
			if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0s" {
				def = "`" + f.DefValue + "`"
			}
			usage := strings.NewReplacer("|", `\|`, "<", "&lt;", ">", "&gt;").Replace(f.Usage)
			fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", name, f.Value.Type(), def, usage)
		})
	}
	_, err := w.Write(b.Bytes())
	return err
}

// addHubFlags adds the flags that find the hub and authenticate to it.
func addHubFlags(c *cobra.Command, opts *Options) {
	f := c.Flags()
	f.StringVar(&opts.Monitoring, "monitoring", "", "address (or URL) of a hub's monitoring port (15014); default: a Ready hub Pod found through the kubeconfig, port-forwarded")
	f.StringVar(&opts.Kube.Kubeconfig, "kubeconfig", "", "kubeconfig of the hub's cluster (default $KUBECONFIG, else ~/.kube/config)")
	f.StringVar(&opts.Kube.Context, "context", "", "kubeconfig context (default: current)")
	f.StringVarP(&opts.Kube.Namespace, "namespace", "n", opts.Kube.Namespace, "namespace of the hub chart's Pods")
	f.StringVar(&opts.HubAuth.Token, "token", "", "Kubernetes token of the config cluster sent to the hub (Authorization: Bearer); on the monitoring port its user needs get on fleet.meshfed.io (the hub chart's ClusterRole meshfed-fleet-reader)")
	f.StringVar(&opts.HubAuth.TokenFile, "token-file", "", "file holding the token for --token")
	f.BoolVar(&opts.HubAuth.Kubeconfig, "kubeconfig-token", false, "send the kubeconfig's current user's credentials (its token, token file or exec plugin) to an address given with --monitoring; a hub found through the kubeconfig always gets them unless --token is given")
}

func first(a []string) string {
	if len(a) == 0 {
		return ""
	}
	return a[0]
}

// runCommand carries out opts as the binary does: a hub found through the
// kubeconfig is reached by a port-forward through the apiserver.
func runCommand(ctx context.Context, opts Options, stdout io.Writer) error {
	return runCommandWith(portForward)(ctx, opts, stdout)
}

// runCommandWith carries out opts: it finds the hub when no address was
// given (reaching its Pod with forward), and turns -o yaml into JSON
// converted on the way out.
func runCommandWith(forward forwarder) executor {
	return func(ctx context.Context, opts Options, stdout io.Writer) error {
		return runResolved(ctx, opts, stdout, forward)
	}
}

func runResolved(ctx context.Context, opts Options, stdout io.Writer, forward forwarder) error {
	needsHub := opts.Command != cmdRemoteSecret && (opts.Command != cmdVersion || opts.FleetVersions)
	if needsHub && opts.Monitoring == "" && (opts.Command != cmdProxyStatus || opts.Hub == "") {
		dctx, cancel := context.WithTimeout(ctx, opts.Timeout) // an unreachable apiserver ends too
		addr, stop, err := discoverMonitoring(dctx, opts.Kube, forward)
		cancel()
		switch {
		case err != nil && opts.Command == cmdVersion:
			opts.FleetVersions = false // the client's version stands alone
		case err != nil:
			return err
		default:
			defer stop()
			opts.Monitoring = addr
			if opts.HubAuth.Token == "" && opts.HubAuth.TokenFile == "" {
				opts.HubAuth.Kubeconfig = true
			}
		}
	}
	if opts.Output != outputYAML {
		return run(ctx, opts, stdout)
	}
	opts.Output = outputJSON
	var js bytes.Buffer
	if err := run(ctx, opts, &js); err != nil {
		return err
	}
	y, err := yaml.JSONToYAML(js.Bytes())
	if err != nil {
		return fmt.Errorf("-o yaml: %w", err)
	}
	_, err = stdout.Write(y)
	return err
}
