package framework

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// EnvChromiumBinary names the browser of the console tests (make browser
// installs Debian's chromium at DefaultChromium).
const EnvChromiumBinary = "MESHFED_CHROMIUM_BIN"

// DefaultChromium is where Debian's chromium package puts the browser.
const DefaultChromium = "/usr/bin/chromium"

// BrowserOptions configures a headless browser.
type BrowserOptions struct {
	// Binary is the Chromium (or Chrome) executable.
	Binary string
	// UserDataDir is the browser's profile directory; it must be new and
	// empty, so that no earlier state (cache, cookies) leaks into a test.
	UserDataDir string
	// Width and Height are the window size in CSS pixels (default
	// 1280 × 900).
	Width, Height int
}

// Browser is a headless Chromium driven over the DevTools protocol
// (chromedp): a real browser engine running the console's HTML, CSS and
// JavaScript, with no network access beyond what a page asks for.
type Browser struct {
	alloc  context.Context // the allocator's context: the process
	cancel context.CancelFunc
	root   context.Context // the first tab, which owns the browser process
}

// StartBrowser starts the browser; Close stops it. The flags are the
// quiet, sandbox-free set that runs as root in a container: no GPU, no
// first-run UI, no background requests (updates, sync, field trials).
func StartBrowser(ctx context.Context, opts BrowserOptions) (*Browser, error) {
	if opts.Width == 0 {
		opts.Width, opts.Height = 1280, 900
	}
	if entries, err := os.ReadDir(opts.UserDataDir); err != nil || len(entries) > 0 {
		return nil, fmt.Errorf("browser profile %q must be an existing empty directory (err %v)", opts.UserDataDir, err)
	}
	flags := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(opts.Binary),
		chromedp.UserDataDir(opts.UserDataDir),
		chromedp.WindowSize(opts.Width, opts.Height),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("no-default-browser-check", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.Flag("mute-audio", true),
	}
	alloc, cancelAlloc := chromedp.NewExecAllocator(ctx, flags...)
	root, cancelRoot := chromedp.NewContext(alloc)
	// The first Run starts the process.
	if err := chromedp.Do(root); err != nil {
		cancelRoot()
		cancelAlloc()
		return nil, fmt.Errorf("starting %s: %w", opts.Binary, err)
	}
	return &Browser{alloc: alloc, root: root, cancel: func() { cancelRoot(); cancelAlloc() }}, nil
}

// Close stops the browser process and waits for it.
func (b *Browser) Close() { b.cancel() }

// Tab is one browser tab. Every method takes a timeout from the caller's
// context; JavaScript exceptions the page throws are collected (Errors).
type Tab struct {
	ctx    context.Context
	cancel context.CancelFunc

	mu     sync.Mutex
	errors []string
}

// NewTab opens a blank tab.
func (b *Browser) NewTab() (*Tab, error) {
	ctx, cancel := chromedp.NewContext(b.root)
	tab := &Tab{ctx: ctx, cancel: cancel}
	if err := chromedp.Do(ctx); err != nil {
		cancel()
		return nil, fmt.Errorf("opening a tab: %w", err)
	}
	err := chromedp.Listen(ctx, func(ev any) {
		if e, ok := ev.(*runtime.EventExceptionThrown); ok {
			msg := (&chromedp.ExceptionError{ExceptionDetails: e.ExceptionDetails}).Error()
			tab.mu.Lock()
			tab.errors = append(tab.errors, msg)
			tab.mu.Unlock()
		}
	})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("listening to the tab: %w", err)
	}
	return tab, nil
}

// Close closes the tab.
func (t *Tab) Close() { t.cancel() }

// run runs actions on the tab until ctx ends or 30 s pass, whichever is
// first; an abandoned action leaves the tab usable.
func run[T any](ctx context.Context, t *Tab, action chromedp.Action[T]) (T, error) {
	// The DevTools calls need the tab's context (chromedp finds the tab in
	// it); the deadline is a child of it, cut short by the caller's ctx.
	rctx, cancel := context.WithTimeout(t.ctx, 30*time.Second)
	defer cancel()
	stop := context.AfterFunc(ctx, cancel)
	defer stop()
	return chromedp.Run(rctx, action)
}

// Navigate loads url and waits for its load event.
func (t *Tab) Navigate(ctx context.Context, url string) error {
	if _, err := run(ctx, t, chromedp.Navigate(url)); err != nil {
		return fmt.Errorf("navigating to %s: %w", url, err)
	}
	return nil
}

// Eval evaluates a JavaScript expression in the page and decodes its
// (JSON-serializable) value into out.
func (t *Tab) Eval(ctx context.Context, expr string, out any) error {
	raw, err := run(ctx, t, chromedp.Evaluate[json.RawMessage](expr))
	if err != nil {
		return fmt.Errorf("evaluating %q: %w", expr, err)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("decoding %s of %q: %w", raw, expr, err)
	}
	return nil
}

// ErrNoElement is returned by Text for a selector that matches nothing.
var ErrNoElement = errors.New("no element matches")

// Text returns the trimmed text content of the first element matching the
// CSS selector, without waiting for it to appear.
func (t *Tab) Text(ctx context.Context, selector string) (string, error) {
	var got *string
	expr := fmt.Sprintf(`(function(){var e=document.querySelector(%q);return e?e.textContent:null})()`, selector)
	if err := t.Eval(ctx, expr, &got); err != nil {
		return "", err
	}
	if got == nil {
		return "", fmt.Errorf("%q: %w", selector, ErrNoElement)
	}
	return strings.TrimSpace(*got), nil
}

// Texts returns the trimmed text content of every element matching the
// selector, in document order.
func (t *Tab) Texts(ctx context.Context, selector string) ([]string, error) {
	var got []string
	expr := fmt.Sprintf(`Array.from(document.querySelectorAll(%q), function(e){return e.textContent.trim()})`, selector)
	if err := t.Eval(ctx, expr, &got); err != nil {
		return nil, err
	}
	return got, nil
}

// Attrs returns attribute attr of every element matching the selector, in
// document order.
func (t *Tab) Attrs(ctx context.Context, selector, attr string) ([]string, error) {
	var got []string
	expr := fmt.Sprintf(`Array.from(document.querySelectorAll(%q), function(e){return e.getAttribute(%q)||""})`, selector, attr)
	if err := t.Eval(ctx, expr, &got); err != nil {
		return nil, err
	}
	return got, nil
}

// Screenshot writes a PNG of the whole page (beyond the window) to path.
func (t *Tab) Screenshot(ctx context.Context, path string) error {
	png, err := run(ctx, t, chromedp.FullScreenshot(100))
	if err != nil {
		return fmt.Errorf("screenshot: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, png, 0o644)
}

// Errors returns the JavaScript exceptions the tab's pages threw so far.
func (t *Tab) Errors() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]string(nil), t.errors...)
}

// TestBrowserBinary returns $MESHFED_CHROMIUM_BIN, or DefaultChromium. A
// missing browser fails the test (no skip: `make e2e` installs it).
func TestBrowserBinary(t testing.TB) string {
	t.Helper()
	p := os.Getenv(EnvChromiumBinary)
	if p == "" {
		p = DefaultChromium
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("browser: %v (run `make browser`, which installs Debian's chromium, or set %s)", err, EnvChromiumBinary)
	}
	return p
}

// StartTestBrowser starts a headless browser with a new empty profile under
// the test's temporary directory and closes it in t.Cleanup.
func StartTestBrowser(t testing.TB) *Browser {
	t.Helper()
	b, err := StartBrowser(t.Context(), BrowserOptions{Binary: TestBrowserBinary(t), UserDataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

// NewTestTab opens a tab of b that is closed in t.Cleanup; at cleanup the
// test fails if a page threw a JavaScript exception.
func NewTestTab(t testing.TB, b *Browser) *Tab {
	t.Helper()
	tab, err := b.NewTab()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if errs := tab.Errors(); len(errs) > 0 {
			t.Errorf("the page threw JavaScript exceptions: %s", strings.Join(errs, "; "))
		}
		tab.Close()
	})
	return tab
}
