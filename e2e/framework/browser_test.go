package framework

import (
	"bytes"
	"errors"
	"fmt"
	"image/png"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshfed/meshfed/pkg/testutil"
)

// TestBrowser: the headless browser loads a page, runs its script (which
// changes the DOM after load), answers Text and Attrs from the live DOM,
// takes a PNG screenshot of the page's full height, and reports a script's
// uncaught exception.
func TestBrowser(t *testing.T) {
	const page = `<!doctype html><html><head><title>t</title></head><body style="margin:0">
<p id="greeting">loading</p><ul><li data-n="1">a</li><li data-n="2">b</li></ul>
<div style="height:2000px">tall</div>
<script>setTimeout(function(){document.getElementById("greeting").textContent="hello from script"},100)</script>
</body></html>`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/":
			fmt.Fprint(w, page)
		case "/throws":
			fmt.Fprint(w, `<!doctype html><script>throw new Error("thrown on purpose")</script>`)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()

	b := StartTestBrowser(t)
	tab, err := b.NewTab()
	if err != nil {
		t.Fatal(err)
	}
	defer tab.Close()
	ctx := t.Context()
	if err := tab.Navigate(ctx, srv.URL+"/"); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		got, err := tab.Text(ctx, "#greeting")
		if err != nil {
			return err
		}
		if got != "hello from script" {
			return fmt.Errorf("greeting is %q", got)
		}
		return nil
	})
	if _, err := tab.Text(ctx, "#absent"); !errors.Is(err, ErrNoElement) {
		t.Errorf("Text of a missing element: %v, want ErrNoElement", err)
	}
	ns, err := tab.Attrs(ctx, "li", "data-n")
	if texts, err := tab.Texts(ctx, "li"); err != nil || strings.Join(texts, ",") != "a,b" {
		t.Errorf("Texts = %v, %v; want [a b]", texts, err)
	}
	if err != nil || strings.Join(ns, ",") != "1,2" {
		t.Errorf("Attrs = %v, %v; want [1 2]", ns, err)
	}
	path := filepath.Join(t.TempDir(), "shot.png")
	if err := tab.Screenshot(ctx, path); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("screenshot is no PNG: %v", err)
	}
	if h := img.Bounds().Dy(); h < 2000 {
		t.Errorf("screenshot is %d px high, want the full page (> 2000)", h)
	}
	if errs := tab.Errors(); len(errs) > 0 {
		t.Errorf("a quiet page reported exceptions: %v", errs)
	}

	if err := tab.Navigate(ctx, srv.URL+"/throws"); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		errs := tab.Errors()
		if len(errs) != 1 || !strings.Contains(errs[0], "thrown on purpose") {
			return fmt.Errorf("exceptions %q, want the page's one", errs)
		}
		return nil
	})
}
