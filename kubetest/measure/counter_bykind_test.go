package measure_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/upshift-dev/upshift/kubetest/measure"
)

// TestCounterByResource: requests are counted by verb and resource, lists
// and watches told from gets, subresources kept.
func TestCounterByResource(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()
	var c measure.Counter
	client := &http.Client{Transport: c.Wrap(http.DefaultTransport)}
	for _, r := range []struct{ method, path string }{
		{http.MethodGet, "/apis/gateway.networking.k8s.io/v1/namespaces/shop/httproutes/web"},
		{http.MethodGet, "/apis/gateway.networking.k8s.io/v1/namespaces/shop/httproutes"},
		{http.MethodGet, "/apis/gateway.networking.k8s.io/v1/httproutes?watch=true"},
		{http.MethodPut, "/apis/apps/v1/namespaces/shop/deployments/web-a"},
		{http.MethodPut, "/apis/operator.upshift.dev/v1alpha1/namespaces/shop/releases/web/status"},
		{http.MethodPost, "/apis/events.k8s.io/v1/namespaces/shop/events"},
		{http.MethodGet, "/api/v1/namespaces/shop/pods/p"},
		{http.MethodGet, "/api/v1/namespaces"},
		{http.MethodGet, "/healthz"},
	} {
		send(t, client, r.method, srv.URL+r.path)
	}
	want := map[string]int64{
		"GET httproutes": 1, "LIST httproutes": 1, "WATCH httproutes": 1, "PUT deployments": 1,
		"PUT releases/status": 1, "POST events": 1, "GET pods": 1, "LIST namespaces": 1, "LIST healthz": 1,
	}
	if d := cmp.Diff(want, c.ByResource()); d != "" {
		t.Errorf("by resource (-want +got):\n%s", d)
	}
}
