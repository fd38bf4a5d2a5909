package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/meshfed/meshfed/pkg/debugdoc"
)

// istioConfig prints what the hub does with the mesh's Istio config
// (/debug/configz): every object, or the one KIND/NS/NAME names, with its
// state and, in detail, its errors, shadowing and notes. Every replica
// reads the config itself, so any replica answers for the fleet.
func istioConfig(ctx context.Context, opts Options, stdout io.Writer) error {
	var doc debugdoc.Configz
	if err := getDoc(ctx, opts, debugdoc.ConfigzPath, &doc); err != nil {
		return err
	}
	objs := doc.Objects
	if opts.Object != "" {
		kind, ns, name, err := parseObjectName(opts.Object)
		if err != nil {
			return err
		}
		o, ok := doc.Object(kind, ns, name)
		if !ok {
			return fmt.Errorf("%w %s: the hub %s holds no such object", errUnknownObject, opts.Object, opts.Monitoring)
		}
		objs = []debugdoc.ConfigzObject{o}
	}
	if opts.Output == outputJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if opts.Object != "" {
			return enc.Encode(objs[0])
		}
		return enc.Encode(doc)
	}
	if opts.Object != "" {
		return writeConfigDetail(stdout, objs[0])
	}
	if !doc.Synced {
		fmt.Fprintln(stdout, "# the hub has not read the config completely yet")
	}
	tw := tabwriter.NewWriter(stdout, 0, 8, 3, ' ', 0)
	fmt.Fprintln(tw, "KIND\tNAMESPACE\tNAME\tGENERATION\tSTATE\tDETAIL")
	for _, o := range objs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", o.Kind, o.Namespace, o.Name, o.Generation, o.State, configSummary(o))
	}
	return tw.Flush()
}

// errUnknownObject is returned when KIND/NS/NAME names no object.
var errUnknownObject = errors.New("unknown object")

// parseObjectName splits KIND/NS/NAME; KIND is case-insensitive and may
// be Istio's short name (vs, dr, se, pa, ap).
func parseObjectName(s string) (kind, ns, name string, err error) {
	parts := strings.Split(s, "/")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
		return "", "", "", fmt.Errorf("%q: want KIND/NAMESPACE/NAME, e.g. VirtualService/demo/echo", s)
	}
	switch strings.ToLower(parts[0]) {
	case "virtualservice", "vs":
		kind = "VirtualService"
	case "destinationrule", "dr":
		kind = "DestinationRule"
	case "serviceentry", "se":
		kind = "ServiceEntry"
	case "sidecar":
		kind = "Sidecar"
	case "peerauthentication", "pa":
		kind = "PeerAuthentication"
	case "authorizationpolicy", "ap":
		kind = "AuthorizationPolicy"
	default:
		return "", "", "", fmt.Errorf("%q: kind %q is not one the hub reads (VirtualService, DestinationRule, ServiceEntry, Sidecar, PeerAuthentication, AuthorizationPolicy)", s, parts[0])
	}
	return kind, parts[1], parts[2], nil
}

// configSummary is the table's one-line detail of o.
func configSummary(o debugdoc.ConfigzObject) string {
	switch {
	case len(o.Errors) > 0:
		more := ""
		if len(o.Errors) > 1 {
			more = fmt.Sprintf(" (+%d more)", len(o.Errors)-1)
		}
		return o.Errors[0].Field + ": " + o.Errors[0].Detail + more
	case len(o.ShadowedBy) > 0:
		s := o.ShadowedBy[0]
		return fmt.Sprintf("host %s held by %s/%s/%s", s.Host, s.By.Kind, s.By.Namespace, s.By.Name)
	case len(o.Notes) > 0:
		return fmt.Sprintf("%d notes", len(o.Notes))
	}
	return "-"
}

// writeConfigDetail prints everything the hub says of one object.
func writeConfigDetail(w io.Writer, o debugdoc.ConfigzObject) error {
	fmt.Fprintf(w, "%s %s/%s generation %d: %s", o.Kind, o.Namespace, o.Name, o.Generation, o.State)
	if o.Reason != "" {
		fmt.Fprintf(w, " (%s)", o.Reason)
	}
	fmt.Fprintln(w)
	for _, e := range o.Errors {
		fmt.Fprintf(w, "  error  %s: %s\n", e.Field, e.Detail)
	}
	for _, s := range o.ShadowedBy {
		fmt.Fprintf(w, "  shadowed  host %s is held by %s/%s/%s\n", s.Host, s.By.Kind, s.By.Namespace, s.By.Name)
	}
	for _, n := range o.Notes {
		fmt.Fprintf(w, "  note  %s\n", n)
	}
	return nil
}
