package gateway

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	"github.com/upshift-dev/upshift/internal/conflict"
	"github.com/upshift-dev/upshift/internal/ownwrite"
	"github.com/upshift-dev/upshift/internal/watchloop"
)

// Kinds of routes the Router manages.
const (
	KindHTTPRoute = "HTTPRoute"
	KindGRPCRoute = "GRPCRoute"
)

// RouteRef names one route.
type RouteRef struct {
	// Kind is KindHTTPRoute (the default when empty) or KindGRPCRoute.
	Kind      string `json:"kind,omitempty"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

func (r RouteRef) kind() string {
	if r.Kind == "" {
		return KindHTTPRoute
	}
	return r.Kind
}

// key is r with its kind spelled out, to key maps.
func (r RouteRef) key() RouteRef { r.Kind = r.kind(); return r }

func (r RouteRef) String() string { return r.kind() + " " + r.Namespace + "/" + r.Name }

// route is an HTTPRoute or a GRPCRoute.
type route struct {
	http *gwv1.HTTPRoute
	grpc *gwv1.GRPCRoute
}

func (r route) object() client.Object {
	if r.http != nil {
		return r.http
	}
	return r.grpc
}

// ref names r.
func (r route) ref() RouteRef {
	if r.http != nil {
		return RouteRef{Kind: KindHTTPRoute, Namespace: r.http.Namespace, Name: r.http.Name}
	}
	return RouteRef{Kind: KindGRPCRoute, Namespace: r.grpc.Namespace, Name: r.grpc.Name}
}

func (r route) meta() *metav1.ObjectMeta {
	if r.http != nil {
		return &r.http.ObjectMeta
	}
	return &r.grpc.ObjectMeta
}

func (r route) rules() ruleRefs {
	if r.http != nil {
		return httpRefs(r.http)
	}
	return grpcRefs(r.grpc)
}

func (r route) parentRefs() []gwv1.ParentReference {
	if r.http != nil {
		return r.http.Spec.ParentRefs
	}
	return r.grpc.Spec.ParentRefs
}

func (r route) hostnames() []gwv1.Hostname {
	if r.http != nil {
		return r.http.Spec.Hostnames
	}
	return r.grpc.Spec.Hostnames
}

func (r route) parents() []gwv1.RouteParentStatus {
	if r.http != nil {
		return r.http.Status.Parents
	}
	return r.grpc.Status.Parents
}

// routes reads and writes routes; implemented over a controller-runtime
// client and over the gateway-api clientset.
type routes interface {
	get(ctx context.Context, ref RouteRef) (route, error)
	update(ctx context.Context, r route) error
	// watch watches ref's collection in its namespace with opts (whose
	// field selector names ref).
	watch(ctx context.Context, ref RouteRef, opts metav1.ListOptions) (watch.Interface, error)
	// list reads every route of kind in namespace ns ("" for all).
	list(ctx context.Context, kind, ns string) ([]route, error)
}

// errNoWatch is Notify's error for a controller-runtime client that cannot
// watch.
var errNoWatch = fmt.Errorf("%w: the controller-runtime client is not a client.WithWatch (build it with client.NewWithWatch)", watchloop.ErrUnsupported)

func newRoute(kind string) (route, error) {
	switch kind {
	case KindHTTPRoute:
		return route{http: &gwv1.HTTPRoute{}}, nil
	case KindGRPCRoute:
		return route{grpc: &gwv1.GRPCRoute{}}, nil
	}
	return route{}, fmt.Errorf("%w: route kind %q: want %s or %s", ErrInvalid, kind, KindHTTPRoute, KindGRPCRoute)
}

// crRoutes reads and writes routes through a controller-runtime client.
// With own set (Config.APIReader), the client reads from an informer cache:
// a get is resolved against the Router's own writes (ownwrite.Memory), and
// the get after a conflict reads api, the API server. Lists come from the
// client as they are, cache or not: they only place the extra rules among
// the peer routes (peersOf), and another writer's change reaches them once
// the cache has it, as with any reader.
type crRoutes struct {
	c   client.Client
	api client.Reader
	own *ownwrite.Memory[RouteRef]
}

func (c crRoutes) get(ctx context.Context, ref RouteRef) (route, error) {
	r, err := newRoute(ref.kind())
	if err != nil {
		return r, err
	}
	key := types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}
	if c.own == nil {
		return r, c.c.Get(ctx, key, r.object())
	}
	obj, err := c.own.Get(ref.key(), func(server bool) (ownwrite.Object, error) {
		fresh, _ := newRoute(ref.kind())
		var rd client.Reader = c.c
		if server {
			rd = c.api
		}
		return fresh.object(), rd.Get(ctx, key, fresh.object())
	})
	if got, ok := routeOf(obj); ok {
		r = got
	}
	return r, err
}

func (c crRoutes) update(ctx context.Context, r route) error {
	if c.own == nil {
		return c.c.Update(ctx, r.object())
	}
	return c.own.Update(r.ref().key(), r.object(), func() error { return c.c.Update(ctx, r.object()) })
}

func (c crRoutes) watch(ctx context.Context, ref RouteRef, opts metav1.ListOptions) (watch.Interface, error) {
	wc, ok := c.c.(client.WithWatch)
	if !ok {
		return nil, errNoWatch
	}
	var list client.ObjectList = &gwv1.HTTPRouteList{}
	if ref.kind() == KindGRPCRoute {
		list = &gwv1.GRPCRouteList{}
	}
	// The field selector travels in Raw, as the caller built it.
	return wc.Watch(ctx, list, &client.ListOptions{Namespace: ref.Namespace, Raw: &opts})
}

func (c crRoutes) list(ctx context.Context, kind, ns string) ([]route, error) {
	var out []route
	if kind == KindGRPCRoute {
		var l gwv1.GRPCRouteList
		if err := c.c.List(ctx, &l, client.InNamespace(ns)); err != nil {
			return nil, err
		}
		for i := range l.Items {
			out = append(out, route{grpc: &l.Items[i]})
		}
		return out, nil
	}
	var l gwv1.HTTPRouteList
	if err := c.c.List(ctx, &l, client.InNamespace(ns)); err != nil {
		return nil, err
	}
	for i := range l.Items {
		out = append(out, route{http: &l.Items[i]})
	}
	return out, nil
}

type csRoutes struct{ cs versioned.Interface }

func (c csRoutes) list(ctx context.Context, kind, ns string) ([]route, error) {
	var out []route
	if kind == KindGRPCRoute {
		l, err := c.cs.GatewayV1().GRPCRoutes(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		for i := range l.Items {
			out = append(out, route{grpc: &l.Items[i]})
		}
		return out, nil
	}
	l, err := c.cs.GatewayV1().HTTPRoutes(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for i := range l.Items {
		out = append(out, route{http: &l.Items[i]})
	}
	return out, nil
}

func (c csRoutes) get(ctx context.Context, ref RouteRef) (route, error) {
	switch ref.kind() {
	case KindHTTPRoute:
		h, err := c.cs.GatewayV1().HTTPRoutes(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		return route{http: h}, err
	case KindGRPCRoute:
		g, err := c.cs.GatewayV1().GRPCRoutes(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		return route{grpc: g}, err
	}
	return newRoute(ref.kind())
}

func (c csRoutes) watch(ctx context.Context, ref RouteRef, opts metav1.ListOptions) (watch.Interface, error) {
	if ref.kind() == KindGRPCRoute {
		return c.cs.GatewayV1().GRPCRoutes(ref.Namespace).Watch(ctx, opts)
	}
	return c.cs.GatewayV1().HTTPRoutes(ref.Namespace).Watch(ctx, opts)
}

func (c csRoutes) update(ctx context.Context, r route) error {
	if r.http != nil {
		out, err := c.cs.GatewayV1().HTTPRoutes(r.http.Namespace).Update(ctx, r.http, metav1.UpdateOptions{})
		if err == nil {
			*r.http = *out
		}
		return err
	}
	out, err := c.cs.GatewayV1().GRPCRoutes(r.grpc.Namespace).Update(ctx, r.grpc, metav1.UpdateOptions{})
	if err == nil {
		*r.grpc = *out
	}
	return err
}

// defaultConflictRetries is what a MaxConflictRetries of 0 means.
const defaultConflictRetries = 5

// updateRoute is a read-modify-write of one route: it reads ref, lets
// change modify it, and writes it back when change reports a change. A
// write that loses an optimistic-concurrency race is retried from a fresh
// read, up to retries times (see conflict.Retry). Conflicts that outlast
// the retries return an error that matches rollout.ErrConflict (and
// apierrors.IsConflict); other errors go through apiError.
func updateRoute(ctx context.Context, api routes, ref RouteRef, retries int, change func(route) (bool, error)) error {
	return conflict.Retry(ctx, retries, func() error {
		rt, err := api.get(ctx, ref)
		if err != nil {
			return apiError(err, ref)
		}
		changed, err := change(rt)
		if err != nil || !changed {
			return err
		}
		return apiError(api.update(ctx, rt), ref) // a wrapped conflict is still one
	})
}
