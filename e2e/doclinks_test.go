package e2e

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// markdownLink is an inline link or image: [text](target "title").
var markdownLink = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)

// inlineCode is a code span, whose brackets are not links.
var inlineCode = regexp.MustCompile("`[^`]*`")

// docPage is one Markdown file of the repository: its links and the
// anchors its headings make.
type docPage struct {
	links   []docLink
	anchors map[string]bool
}

type docLink struct {
	line   int
	target string
}

// readDocPage reads path's links (outside code) and heading anchors.
func readDocPage(path string) (*docPage, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	p := &docPage{anchors: map[string]bool{}}
	seen := map[string]int{}
	fenced := false
	for i, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		if h, ok := headingText(line); ok {
			slug := headingSlug(h)
			if n := seen[slug]; n > 0 {
				p.anchors[fmt.Sprintf("%s-%d", slug, n)] = true
			} else {
				p.anchors[slug] = true
			}
			seen[slug]++
		}
		for _, m := range markdownLink.FindAllStringSubmatch(inlineCode.ReplaceAllString(line, ""), -1) {
			p.links = append(p.links, docLink{line: i + 1, target: m[1]})
		}
	}
	return p, nil
}

// headingText returns the text of an ATX heading line.
func headingText(line string) (string, bool) {
	rest := strings.TrimLeft(line, "#")
	if n := len(line) - len(rest); n == 0 || n > 6 || !strings.HasPrefix(rest, " ") {
		return "", false
	}
	return strings.TrimSpace(rest), true
}

// headingSlug is the anchor GitHub gives a heading: lower case, code
// marks and punctuation dropped (letters, digits, '-' and '_' stay),
// spaces become '-'. A repeated heading gets -1, -2, ... (readDocPage).
func headingSlug(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}

// docFiles are the Markdown files a reader of the repository follows:
// README.md, docs/ and the charts' READMEs.
func docFiles(t *testing.T, root string) []string {
	t.Helper()
	files := []string{filepath.Join(root, "README.md")}
	for _, pattern := range []string{"docs/*.md", "docs/*/*.md", "remote-charts/*/README.md"} {
		m, err := filepath.Glob(filepath.Join(root, pattern))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	return files
}

// TestDocLinks (part of make lint): every relative link and anchor of
// README.md, docs/ and the charts' READMEs resolves, and every page of
// docs/ is linked from the README or from another page.
func TestDocLinks(t *testing.T) {
	root := filepath.Join("..")
	files := docFiles(t, root)
	pages := map[string]*docPage{}
	for _, f := range files {
		p, err := readDocPage(f)
		if err != nil {
			t.Fatal(err)
		}
		pages[filepath.Clean(f)] = p
	}
	linked := map[string]bool{}
	for _, f := range files {
		for _, l := range pages[filepath.Clean(f)].links {
			if err := checkDocLink(root, f, l.target, pages, linked); err != nil {
				t.Errorf("%s:%d: link %s: %v", relPath(root, f), l.line, l.target, err)
			}
		}
	}
	for _, f := range files {
		if rel := relPath(root, f); strings.HasPrefix(rel, "docs/") && !linked[filepath.Clean(f)] {
			t.Errorf("%s is linked from no page: link it from README.md or another page of docs/", rel)
		}
	}
}

// checkDocLink resolves target as written in file from, marking the file
// it names as linked (but not from itself).
func checkDocLink(root, from, target string, pages map[string]*docPage, linked map[string]bool) error {
	if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
		return nil
	}
	path, anchor, _ := strings.Cut(target, "#")
	dest := filepath.Clean(from)
	if path != "" {
		dest = filepath.Clean(filepath.Join(filepath.Dir(from), path))
		info, err := os.Stat(dest)
		if err != nil {
			return fmt.Errorf("no file %s", relPath(root, dest))
		}
		if dest != filepath.Clean(from) {
			linked[dest] = true
		}
		if info.IsDir() || anchor == "" {
			return nil
		}
	}
	page, ok := pages[dest]
	if !ok {
		if !strings.HasSuffix(dest, ".md") {
			return nil // an anchor into a file of code: a line, not a heading
		}
		p, err := readDocPage(dest)
		if err != nil {
			return err
		}
		page = p
	}
	if !page.anchors[anchor] {
		return fmt.Errorf("%s has no heading #%s (it has %s)", relPath(root, dest), anchor, strings.Join(slices.Sorted(maps.Keys(page.anchors)), ", "))
	}
	return nil
}

func relPath(root, path string) string {
	rel, err := filepath.Rel(root, path)
	if err != nil {
		return path
	}
	return filepath.ToSlash(rel)
}

// TestHeadingSlug pins the anchors GitHub makes of the headings this
// repository writes.
func TestHeadingSlug(t *testing.T) {
	for h, want := range map[string]string{
		"Security policy: PeerAuthentication and AuthorizationPolicy": "security-policy-peerauthentication-and-authorizationpolicy",
		"Istio's own tools: istioctl":                                 "istios-own-tools-istioctl",
		"The `/debug` documents":                                      "the-debug-documents",
		"meshfed-hub":                                                 "meshfed-hub",
		"Envoy sidecars against proxyless clients: cost":              "envoy-sidecars-against-proxyless-clients-cost",
	} {
		if got := headingSlug(h); got != want {
			t.Errorf("headingSlug(%q) = %q, want %q", h, got, want)
		}
	}
}
