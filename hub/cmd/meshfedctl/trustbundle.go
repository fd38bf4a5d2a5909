package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/meshfed/meshfed/pkg/debugdoc"
)

// trustBundle prints the federated trust bundle: a table, the JSON, or the
// concatenated PEM (what workloads put in root-cert.pem).
func trustBundle(ctx context.Context, opts Options, stdout io.Writer) error {
	var doc debugdoc.Trustz
	if err := getDoc(ctx, opts, debugdoc.TrustzPath, &doc); err != nil {
		return err
	}
	switch opts.Output {
	case outputJSON:
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(doc)
	case outputPEM:
		for _, r := range doc.Roots {
			if _, err := io.WriteString(stdout, r.PEM); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 8, 3, ' ', 0)
	fmt.Fprintln(tw, "TRUST DOMAIN\tFINGERPRINT\tSOURCE\tNOT AFTER\tRETIRES")
	for _, r := range doc.Roots {
		fp := r.Fingerprint
		if len(fp) > 16 {
			fp = fp[:16] + "…"
		}
		retires := r.RetireAt
		if retires == "" {
			retires = "-" // trusted until it expires
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.TrustDomain, fp, r.Source, r.NotAfter, retires)
	}
	return tw.Flush()
}
