// Package console is the hub's fleet console: a read-only web page, served
// by every replica on the monitoring port at / and /ui/, that shows the
// whole fleet as the answering replica knows it (and every replica knows
// all of it): remote clusters and their owners, replicas, every proxy's
// status, the trust bundle, and, per proxy and service, the endpoints the
// proxy is sent in priority order (Explain).
//
// Pages are rendered on the server with html/template from templates and
// assets embedded in the binary; nothing is fetched from elsewhere. A small
// script re-fetches the page's <main> every RefreshInterval (the request
// carries the header X-Meshfed-Fragment: main) and swaps it in, so a page
// stays live without a reload and says which replica answered, and when.
// Lists are filtered and paged on the server, so a page stays small with
// 10,000 proxies. Charts are inline SVG drawn from the hub's own metrics.
//
// The console reads the same documents as meshfedctl and the /debug
// endpoints (package debugdoc and proxystatus records), through Sources.
package console
