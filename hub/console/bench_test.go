package console

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
)

// BenchmarkConsolePages renders the overview and the first proxies page
// (100 rows) with 1,000 and 10,000 proxies: the server side of a page load.
func BenchmarkConsolePages(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		c, err := New(Options{Replica: "hub-0", Sources: fleet(n)})
		if err != nil {
			b.Fatal(err)
		}
		for _, page := range []struct{ name, path string }{
			{"overview", "/"}, {"proxies", "/ui/proxies"}, {"proxies-filtered-page-5", "/ui/proxies?status=SYNCED&cluster=cluster-2&page=5"},
		} {
			path := page.path
			b.Run(fmt.Sprintf("proxies=%d/%s", n, page.name), func(b *testing.B) {
				b.ReportAllocs()
				var bytes int
				for b.Loop() {
					w := httptest.NewRecorder()
					c.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
					if w.Code != http.StatusOK {
						b.Fatalf("%s: %d", path, w.Code)
					}
					bytes = w.Body.Len()
				}
				b.ReportMetric(float64(bytes), "page-bytes")
			})
		}
	}
}
