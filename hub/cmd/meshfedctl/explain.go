package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"text/tabwriter"

	"github.com/meshfed/meshfed/pkg/debugdoc"
)

// explain prints what opts.Proxy is sent for opts.ExplainHost: the
// /debug/explainz document, as a table or JSON. It fails when the hub
// cannot explain (an unknown proxy, host, port or subset), saying why.
func explain(ctx context.Context, opts Options, stdout io.Writer) error {
	q := url.Values{"proxy": {opts.Proxy}, "host": {opts.ExplainHost}}
	if opts.ExplainSubset != "" {
		q.Set("subset", opts.ExplainSubset)
	}
	var doc debugdoc.Explainz
	if err := getDoc(ctx, opts, debugdoc.ExplainzPath+"?"+q.Encode(), &doc); err != nil {
		return err
	}
	if doc.Error != "" {
		return errors.New(doc.Error)
	}
	if opts.Output == outputJSON {
		return writeIndentedJSON(stdout, doc)
	}
	return writeExplain(stdout, doc)
}

// writeExplain writes a heading (proxy, its cluster and locality, the
// assignment) and one row per endpoint: PRIORITY ADDRESS CLUSTER LOCALITY
// WEIGHT REASON, the endpoints left out last with priority "-".
func writeExplain(w io.Writer, doc debugdoc.Explainz) error {
	fmt.Fprintf(w, "proxy %s (cluster %s, locality %s, served by %s)\n", doc.Proxy, dash(doc.Cluster), dash(doc.Locality), dash(doc.ServedBy))
	fmt.Fprintf(w, "assignment %s, as replica %s builds it\n\n", doc.Assignment, doc.Replica)
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	fmt.Fprintln(tw, "PRIORITY\tADDRESS\tCLUSTER\tLOCALITY\tWEIGHT\tREASON")
	for _, e := range doc.Endpoints {
		prio, weight := "-", "-"
		if e.Sent {
			prio, weight = strconv.Itoa(e.Priority), strconv.FormatUint(uint64(e.LocalityWeight), 10)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", prio, e.Address, dash(string(e.Cluster)), e.Locality, weight, oneLine(e.Reason))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("writing table: %w", err)
	}
	return nil
}
