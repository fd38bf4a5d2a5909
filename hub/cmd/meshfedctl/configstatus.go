package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/meshfed/meshfed/pkg/debugdoc"
	"github.com/meshfed/meshfed/pkg/proxystatus"
)

// configStatus prints how far the fleet's proxies are with the mesh's
// Istio config (/debug/configstatusz): for every object, how many proxies
// hold its newest generation; with KIND/NS/NAME, that object by cluster
// and replica, and the proxies that do not hold it yet. Every replica
// reads the ledgers and records of the whole fleet, so any replica
// answers.
func configStatus(ctx context.Context, opts Options, stdout io.Writer) error {
	path := debugdoc.ConfigStatusPath
	var kind, ns, name string
	if opts.Object != "" {
		var err error
		kind, ns, name, err = parseObjectName(opts.Object)
		if err != nil {
			return err
		}
		path += "?" + url.Values{"kind": {kind}, "namespace": {ns}, "name": {name}}.Encode()
	}
	var doc proxystatus.ConfigStatusz
	if err := getDoc(ctx, opts, path, &doc); err != nil {
		return err
	}
	if opts.Object != "" {
		o, ok := findRollout(doc, kind, ns, name)
		if !ok {
			return fmt.Errorf("%w %s: the hub %s holds no such object", errUnknownObject, opts.Object, opts.Monitoring)
		}
		if opts.Output == outputJSON {
			return writeIndentedJSON(stdout, o)
		}
		return writeRolloutDetail(stdout, o)
	}
	if opts.Output == outputJSON {
		return writeIndentedJSON(stdout, doc)
	}
	return writeRollouts(stdout, doc)
}

// findRollout returns the rollout of kind/ns/name in doc. It looks the
// object up rather than taking the only one, so that a hub answering
// with every object still gives the right one.
func findRollout(doc proxystatus.ConfigStatusz, kind, ns, name string) (proxystatus.ObjectRollout, bool) {
	for _, o := range doc.Objects {
		if o.Kind == kind && o.Namespace == ns && o.Name == name {
			return o, true
		}
	}
	return proxystatus.ObjectRollout{}, false
}

// writeIndentedJSON writes v as indented JSON.
func writeIndentedJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("writing JSON: %w", err)
	}
	return nil
}

// writeRollouts prints every object's rollout, one row each, then one
// line per replica read.
func writeRollouts(w io.Writer, doc proxystatus.ConfigStatusz) error {
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	fmt.Fprintln(tw, "KIND\tNAMESPACE\tNAME\tGEN\tPROXIES\tSYNCED\tSTALE\tNACKED\tDETAIL")
	for _, o := range doc.Objects {
		// Generation 0: no replica applies the object (only the reason
		// the hub refuses it is known).
		gen := "-"
		if o.Generation != 0 {
			gen = strconv.FormatInt(o.Generation, 10)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\n", o.Kind, o.Namespace, o.Name, gen,
			o.Proxies, o.Synced, o.Stale, o.Nacked, rolloutDetail(o))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("writing table: %w", err)
	}
	if len(doc.Replicas) > 0 {
		fmt.Fprintln(w)
	}
	for _, r := range doc.Replicas {
		line := fmt.Sprintf("replica %s: epoch %d, %d objects, %d proxies", r.Replica, r.Epoch, r.Objects, r.Proxies)
		if r.NoLedger {
			line = fmt.Sprintf("replica %s: %d proxies, no config ledger yet", r.Replica, r.Proxies)
		}
		if _, err := fmt.Fprintln(w, line); err != nil {
			return fmt.Errorf("writing table: %w", err)
		}
	}
	return nil
}

// rolloutDetail is the list table's DETAIL of o: "deleted" and the
// reason the hub refuses its newest generation, when so; and, when some
// proxies lack its newest state, where they are: "STALE in cluster-3 (2)".
func rolloutDetail(o proxystatus.ObjectRollout) string {
	var parts []string
	if o.Deleted {
		parts = append(parts, "deleted")
	}
	if o.Rejected != "" {
		parts = append(parts, oneLine(o.Rejected))
	}
	if o.Synced < o.Proxies {
		for _, part := range []struct {
			state proxystatus.RolloutState
			n     func(proxystatus.ClusterRollout) int
		}{
			{proxystatus.RolloutStale, func(c proxystatus.ClusterRollout) int { return c.Stale }},
			{proxystatus.RolloutNacked, func(c proxystatus.ClusterRollout) int { return c.Nacked }},
		} {
			var in []string
			for _, c := range o.Clusters {
				if n := part.n(c); n > 0 {
					in = append(in, fmt.Sprintf("%s (%d)", dash(c.Cluster), n))
				}
			}
			if len(in) > 0 {
				parts = append(parts, fmt.Sprintf("%s in %s", part.state, strings.Join(in, ", ")))
			}
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, "; ")
}

// writeRolloutDetail prints one object's rollout: its summary, the
// reason the hub refuses it, its counts by cluster and by replica, and
// the proxies that do not hold its newest generation.
func writeRolloutDetail(w io.Writer, o proxystatus.ObjectRollout) error {
	fmt.Fprintln(w, o.Summary())
	if o.Rejected != "" {
		fmt.Fprintf(w, "Rejected: %s\n", oneLine(o.Rejected))
	}
	if len(o.Clusters) > 0 {
		fmt.Fprintln(w)
		tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
		fmt.Fprintln(tw, "CLUSTER\tPROXIES\tSYNCED\tSTALE\tNACKED")
		for _, c := range o.Clusters {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\n", dash(c.Cluster), c.Proxies, c.Synced, c.Stale, c.Nacked)
		}
		if err := tw.Flush(); err != nil {
			return fmt.Errorf("writing table: %w", err)
		}
	}
	if len(o.Replicas) > 0 {
		fmt.Fprintln(w)
		tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
		fmt.Fprintln(tw, "REPLICA\tGENERATION\tEPOCH\tPROXIES\tSYNCED\tNOTE")
		for _, r := range o.Replicas {
			gen, epoch := "-", "-"
			if r.Held {
				gen, epoch = strconv.FormatInt(r.Generation, 10), strconv.FormatUint(r.Epoch, 10)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\n", r.Replica, gen, epoch, r.Proxies, r.Synced, replicaNote(r))
		}
		if err := tw.Flush(); err != nil {
			return fmt.Errorf("writing table: %w", err)
		}
	}
	if len(o.Pending) > 0 {
		fmt.Fprintln(w)
		tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
		fmt.Fprintln(tw, "PROXY\tCLUSTER\tREPLICA\tSTATE\tREASON")
		for _, p := range o.Pending {
			proxy := p.Name
			if proxy == "" {
				proxy = p.Proxy
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", proxy, dash(p.Cluster), dash(p.Replica), p.State, dash(oneLine(p.Reason)))
		}
		if err := tw.Flush(); err != nil {
			return fmt.Errorf("writing table: %w", err)
		}
	}
	return nil
}

// replicaNote is the NOTE of a replica's row in the detail of an object:
// "behind" when the replica does not apply the newest generation, "not
// read" when it has never seen the object, "deleted" when what it applies
// is the removal; "-" when none holds.
func replicaNote(r proxystatus.ReplicaRollout) string {
	var notes []string
	if r.Behind {
		notes = append(notes, "behind")
	}
	if !r.Held {
		notes = append(notes, "not read")
	}
	if r.Deleted {
		notes = append(notes, "deleted")
	}
	if len(notes) == 0 {
		return "-"
	}
	return strings.Join(notes, ", ")
}
