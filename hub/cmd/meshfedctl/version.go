package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/meshfed/meshfed/pkg/debugdoc"
	"github.com/meshfed/meshfed/pkg/version"
)

// versionDoc is what `version -o json` writes.
type versionDoc struct {
	// Client is meshfedctl's own build.
	Client version.Info `json:"client"`
	// Replicas, with --monitoring, lists every live hub replica of the
	// fleet with the version it publishes; Builds counts the distinct
	// versions among them (more than one: a mixed fleet).
	Replicas []replicaVersion `json:"replicas,omitempty"`
	Builds   int              `json:"builds,omitempty"`
}

type replicaVersion struct {
	Replica string `json:"replica"`
	Version string `json:"version"`
}

// printVersion prints meshfedctl's version and, when opts.Monitoring was
// given, every replica's, as the answering replica's /debug/federationz
// lists them.
func printVersion(ctx context.Context, opts Options, stdout io.Writer) error {
	doc := versionDoc{Client: version.Get()}
	if opts.FleetVersions {
		var fed debugdoc.Federationz
		if err := getDoc(ctx, opts, debugdoc.FederationzPath, &fed); err != nil {
			return err
		}
		groups := fed.Versions()
		doc.Builds = len(groups)
		for _, g := range groups {
			for _, r := range g.Replicas {
				doc.Replicas = append(doc.Replicas, replicaVersion{Replica: r, Version: g.Version})
			}
		}
	}
	if opts.Output == outputJSON {
		return writeIndentedJSON(stdout, doc)
	}
	fmt.Fprintf(stdout, "meshfedctl %s\n", doc.Client)
	if !opts.FleetVersions {
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 8, 3, ' ', 0)
	fmt.Fprintln(tw, "REPLICA\tVERSION")
	for _, r := range doc.Replicas {
		fmt.Fprintf(tw, "%s\t%s\n", r.Replica, dash(r.Version))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if doc.Builds > 1 {
		var vs []string
		for _, r := range doc.Replicas {
			if len(vs) == 0 || vs[len(vs)-1] != dash(r.Version) {
				vs = append(vs, dash(r.Version))
			}
		}
		fmt.Fprintf(stdout, "the fleet runs %d builds: %s\n", doc.Builds, strings.Join(vs, ", "))
	}
	return nil
}
