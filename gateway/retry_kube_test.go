package gateway_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/upshift-dev/upshift/gateway"
	"github.com/upshift-dev/upshift/kubetest"
	"github.com/upshift-dev/upshift/rollout"
)

// TestRetryOnKube: on a real API server with Gateway API's standard-channel
// CRDs (what kubetest installs), the Traefik form passes validation, is
// read back as written and not written again, and is taken back; the
// Gateway API form is dropped by the API server, which SetWeights reports
// as a *RetryPrunedError (the weights of that write applied), once: the
// next write takes the record back and the walk back is not refused.
func TestRetryOnKube(t *testing.T) {
	env := kubetest.Get(t)
	ctx := context.Background()
	c := env.Client

	t.Run("traefik", func(t *testing.T) {
		ns := env.Namespace(t)
		installMiddlewareCRD(t, c)
		newRoute(t, c, ns, "web")
		ref := gateway.RouteRef{Namespace: ns, Name: "web"}
		before := getRetryRoute(t, c, ref)
		r := retryRouter(t, c, ref, &traefikRetry)
		if err := r.SetWeights(ctx, rollout.Weights{A: 90, B: 10}); !errors.Is(err, rollout.ErrNotFound) {
			t.Fatalf("SetWeights before the Middleware is applied: %v", err)
		}
		mw, err := gateway.TraefikRetryMiddleware(ns, traefikRetry)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Create(ctx, mw); err != nil {
			t.Fatal(err)
		}
		if err := r.SetWeights(ctx, rollout.Weights{A: 90, B: 10}); err != nil {
			t.Fatal(err)
		}
		after := getRetryRoute(t, c, ref)
		if d := cmp.Diff([]gwv1.HTTPRouteFilter{mwFilter("upshift-retry")}, after.Spec.Rules[0].Filters); d != "" {
			t.Errorf("filters read back (-want +got):\n%s", d)
		}
		if err := r.SetWeights(ctx, rollout.Weights{A: 90, B: 10}); err != nil || r.Counts().Writes != 1 {
			t.Errorf("SetWeights again: %v, %d writes", err, r.Counts().Writes)
		}
		if err := retryRouter(t, c, ref, nil).SetWeights(ctx, rollout.Weights{A: 100, B: 0}); err != nil {
			t.Fatal(err)
		}
		back := getRetryRoute(t, c, ref)
		if d := cmp.Diff(before.Spec, back.Spec); d != "" {
			t.Errorf("spec after the retry was dropped (-before +after):\n%s", d)
		}
		if d := cmp.Diff(before.Annotations, back.Annotations); d != "" {
			t.Errorf("annotations after the retry was dropped (-before +after):\n%s", d)
		}
	})

	t.Run("gateway api pruned", func(t *testing.T) {
		ns := env.Namespace(t)
		newRoute(t, c, ns, "web")
		ref := gateway.RouteRef{Namespace: ns, Name: "web"}
		r := retryRouter(t, c, ref, &gateway.Retry{Mode: gateway.RetryGatewayAPI, Codes: []int{503}, NonIdempotent: true})
		err := r.SetWeights(ctx, rollout.Weights{A: 90, B: 10})
		var pe *gateway.RetryPrunedError
		if !errors.As(err, &pe) || pe.Rule != 0 || !errors.Is(err, rollout.ErrUnsupported) || !rollout.IsPermanent(err) {
			t.Fatalf("SetWeights: %v (%T); want a permanent *RetryPrunedError", err, err)
		}
		rt := getRetryRoute(t, c, ref)
		if rt.Spec.Rules[0].Retry != nil {
			t.Errorf("retry read back: %+v", rt.Spec.Rules[0].Retry)
		}
		if w := *rt.Spec.Rules[0].BackendRefs[1].Weight; w != 10 {
			t.Errorf("canary weight %d, want 10: the weights of that write apply", w)
		}
		// The walk back: no error, and the record that claims a retry goes.
		if err := r.SetWeights(ctx, rollout.Weights{A: 100, B: 0}); err != nil {
			t.Fatalf("walk back: %v", err)
		}
		rt = getRetryRoute(t, c, ref)
		if _, ok := rt.Annotations[gateway.RetryAnnotation(ns, stable, canary)]; ok || *rt.Spec.Rules[0].BackendRefs[1].Weight != 0 {
			t.Errorf("after the walk back: annotations %v, weights %v/%v", rt.Annotations, *rt.Spec.Rules[0].BackendRefs[0].Weight, *rt.Spec.Rules[0].BackendRefs[1].Weight)
		}
	})
}

// installMiddlewareCRD installs a CustomResourceDefinition of Traefik's
// Middleware kind (traefik.io/v1alpha1, any spec) on the test API server,
// once, and waits until it is served.
func installMiddlewareCRD(t *testing.T, c client.Client) {
	t.Helper()
	ctx := context.Background()
	crd := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1",
		"kind":       "CustomResourceDefinition",
		"metadata":   map[string]any{"name": "middlewares.traefik.io"},
		"spec": map[string]any{
			"group": "traefik.io",
			"names": map[string]any{"kind": "Middleware", "listKind": "MiddlewareList", "plural": "middlewares", "singular": "middleware"},
			"scope": "Namespaced",
			"versions": []any{map[string]any{
				"name": "v1alpha1", "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": map[string]any{
					"type": "object", "x-kubernetes-preserve-unknown-fields": true,
				}},
			}},
		},
	}}
	if err := c.Create(ctx, crd); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		l := &unstructured.UnstructuredList{}
		l.SetGroupVersionKind(gateway.MiddlewareGVK.GroupVersion().WithKind("MiddlewareList"))
		err := c.List(ctx, l)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Middleware CRD is not served: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
