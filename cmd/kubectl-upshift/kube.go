package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/upshift-dev/upshift/cmd/kubectl-upshift/internal/object"
	"github.com/upshift-dev/upshift/cmd/kubectl-upshift/render"
	"github.com/upshift-dev/upshift/gateway"
	"github.com/upshift-dev/upshift/strategy"
)

// gatewayGroup is the API group of the routes a standalone rollout keeps
// its state on.
const gatewayGroup = "gateway.networking.k8s.io"

// target is the object a command works on.
type target struct {
	dyn  dynamic.ResourceInterface
	core kubernetes.Interface
	// dc and mapper reach the other objects of a rollout (claims.go) and
	// the CRD of the target's resource (answer.go).
	dc        dynamic.Interface
	mapper    meta.RESTMapper
	gvr       schema.GroupVersionResource
	kind      string
	namespace string
	name      string
	// annotated: the rollout's state is in the route's annotation
	// (gateway.StateAnnotation), its control in gateway.ControlAnnotation.
	annotated bool
	state     object.Path
	strategy  object.Path
	control   object.Path
}

// resolve finds KIND/NAME through discovery.
func resolve(ctx context.Context, o *options, arg string) (*target, error) {
	kindArg, name, ok := strings.Cut(arg, "/")
	if !ok || kindArg == "" || name == "" {
		return nil, withCode(exitError, fmt.Errorf("want KIND/NAME (release/web, httproute/web), got %q", arg))
	}
	statePath, strategyPath, controlPath, err := o.paths()
	if err != nil {
		return nil, withCode(exitError, err)
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = o.kubeconfig
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &o.overrides)
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	// The API server's warnings: those about a write are read as part of
	// its answer (answer.go), the others printed as kubectl prints them.
	cfg.WarningHandler = nil
	cfg.WarningHandlerWithContext = &warningHandler{out: o.errOut}
	ns, _, err := cc.Namespace()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	core, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	disc := memory.NewMemCacheClient(core.Discovery())
	mapper := restmapper.NewShortcutExpander(restmapper.NewDeferredDiscoveryRESTMapper(disc), disc, nil)
	gvr, gr := schema.ParseResourceArg(strings.ToLower(kindArg))
	var full schema.GroupVersionResource
	if gvr != nil {
		full, err = mapper.ResourceFor(*gvr)
	}
	if gvr == nil || err != nil {
		full, err = mapper.ResourceFor(gr.WithVersion(""))
	}
	if err != nil {
		return nil, fmt.Errorf("the server has no resource %q: %w", kindArg, err)
	}
	gvk, err := mapper.KindFor(full)
	if err != nil {
		return nil, err
	}
	mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, err
	}
	t := &target{core: core, dc: dc, mapper: mapper, gvr: full, kind: gvk.Kind, name: name,
		state: statePath, strategy: strategyPath, control: controlPath}
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		t.namespace = ns
		t.dyn = dc.Resource(full).Namespace(ns)
	} else {
		t.dyn = dc.Resource(full)
	}
	t.annotated = full.Group == gatewayGroup
	return t, nil
}

func (t *target) String() string {
	return strings.ToLower(t.kind) + "/" + t.name
}

func (t *target) get(ctx context.Context) (*unstructured.Unstructured, error) {
	u, err := t.dyn.Get(ctx, t.name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", t, err)
	}
	return u, nil
}

// rollout is what an object says of its rollout.
type rollout struct {
	state    strategy.State
	found    bool
	strategy strategy.Strategy
	control  *strategy.Control
	// stale: the status does not reflect the spec's generation yet.
	stale bool
}

// read decodes the rollout of u.
func (t *target) read(u *unstructured.Unstructured) (rollout, error) {
	var r rollout
	if t.annotated {
		ann := u.GetAnnotations()
		if raw, ok := ann[gateway.StateAnnotation]; ok {
			if err := json.Unmarshal([]byte(raw), &r.state); err != nil {
				return r, fmt.Errorf("%s: annotation %s: %w", t, gateway.StateAnnotation, err)
			}
			r.found = true
		}
		if raw, ok := ann[gateway.ControlAnnotation]; ok {
			var c strategy.Control
			if err := json.Unmarshal([]byte(raw), &c); err != nil {
				return r, fmt.Errorf("%s: annotation %s: %w", t, gateway.ControlAnnotation, err)
			}
			r.control = &c
		}
		return r, nil
	}
	var err error
	if r.state, r.found, err = object.State(u, t.state); err != nil {
		return r, fmt.Errorf("%s: %w", t, err)
	}
	if s, err := object.Strategy(u.Object, t.strategy); err == nil {
		r.strategy = s
	} else if !errors.Is(err, object.ErrNoStrategy) {
		return r, fmt.Errorf("%s: %w", t, err)
	}
	if _, found, _ := unstructured.NestedFieldNoCopy(u.Object, t.control...); found {
		c, err := object.Control(u, t.control)
		if err != nil {
			return r, fmt.Errorf("%s: %w", t, err)
		}
		r.control = &c
	}
	if og, found, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration"); found && og < u.GetGeneration() {
		r.stale = true
	}
	return r, nil
}

// events lists the Events about u, with the resource version to watch from.
func (t *target) events(ctx context.Context, u *unstructured.Unstructured) (map[types.UID]corev1.Event, string, error) {
	list, err := t.core.CoreV1().Events(u.GetNamespace()).List(ctx, metav1.ListOptions{FieldSelector: eventSelector(u)})
	if err != nil {
		return nil, "", fmt.Errorf("events of %s: %w", t, err)
	}
	out := make(map[types.UID]corev1.Event, len(list.Items))
	for _, e := range list.Items {
		out[e.UID] = e
	}
	return out, list.ResourceVersion, nil
}

func eventSelector(u *unstructured.Unstructured) string {
	return fields.OneTermEqualSelector("involvedObject.uid", string(u.GetUID())).String()
}

// renderEvents converts Events for the screen.
func renderEvents(evs map[types.UID]corev1.Event) []render.RecentEvent {
	out := make([]render.RecentEvent, 0, len(evs))
	for _, e := range evs {
		out = append(out, render.RecentEvent{Time: eventTime(&e), Type: e.Type, Reason: e.Reason, Message: e.Message, Count: eventCount(&e)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Time.Before(out[j].Time) })
	return out
}

func eventTime(e *corev1.Event) time.Time {
	switch {
	case e.Series != nil && !e.Series.LastObservedTime.IsZero():
		return e.Series.LastObservedTime.Time
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	case !e.FirstTimestamp.IsZero():
		return e.FirstTimestamp.Time
	}
	return e.CreationTimestamp.Time
}

func eventCount(e *corev1.Event) int32 {
	if e.Series != nil && e.Series.Count > 0 {
		return e.Series.Count
	}
	return e.Count
}

// watcher follows one object (or the Events about it) from a resource
// version, starting the watch again where it ended, and from a fresh list
// when the version is too old.
type watcher struct {
	start func(ctx context.Context, rv string) (watch.Interface, error)
	// relist is called when rv expired; it returns the version to watch
	// from.
	relist func(ctx context.Context) (string, error)
	rv     string
	w      watch.Interface
}

// next returns the next event; it blocks until one comes or ctx ends.
func (w *watcher) next(ctx context.Context) (watch.Event, error) {
	for {
		if ctx.Err() != nil {
			return watch.Event{}, ctx.Err()
		}
		if w.w == nil {
			wi, err := w.start(ctx, w.rv)
			if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
				if w.rv, err = w.relist(ctx); err != nil {
					return watch.Event{}, err
				}
				continue
			}
			if err != nil {
				return watch.Event{}, err
			}
			w.w = wi
		}
		select {
		case <-ctx.Done():
			w.stop()
			return watch.Event{}, ctx.Err()
		case ev, ok := <-w.w.ResultChan():
			if !ok {
				w.w = nil // ended by the server: watch again from rv
				continue
			}
			if ev.Type == watch.Error {
				w.stop()
				st := apierrors.FromObject(ev.Object)
				if apierrors.IsResourceExpired(st) || apierrors.IsGone(st) {
					var err error
					if w.rv, err = w.relist(ctx); err != nil {
						return watch.Event{}, err
					}
					continue
				}
				return watch.Event{}, st
			}
			if m, err := meta.Accessor(ev.Object); err == nil {
				w.rv = m.GetResourceVersion()
			}
			if ev.Type == watch.Bookmark {
				continue
			}
			return ev, nil
		}
	}
}

func (w *watcher) stop() {
	if w.w != nil {
		w.w.Stop()
		w.w = nil
	}
}

// objectWatcher follows t's object from rv; relists hand the fresh object to
// onRelist.
func (t *target) objectWatcher(rv string, onRelist func(*unstructured.Unstructured)) *watcher {
	return &watcher{
		rv: rv,
		start: func(ctx context.Context, rv string) (watch.Interface, error) {
			return t.dyn.Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", t.name).String(),
				ResourceVersion: rv, AllowWatchBookmarks: true})
		},
		relist: func(ctx context.Context) (string, error) {
			u, err := t.get(ctx)
			if err != nil {
				return "", err
			}
			onRelist(u)
			return u.GetResourceVersion(), nil
		},
	}
}

// eventWatcher follows the Events about u from rv.
func (t *target) eventWatcher(u *unstructured.Unstructured, rv string, onRelist func(map[types.UID]corev1.Event)) *watcher {
	return &watcher{
		rv: rv,
		start: func(ctx context.Context, rv string) (watch.Interface, error) {
			return t.core.CoreV1().Events(u.GetNamespace()).Watch(ctx, metav1.ListOptions{FieldSelector: eventSelector(u), ResourceVersion: rv})
		},
		relist: func(ctx context.Context) (string, error) {
			evs, rv, err := t.events(ctx, u)
			if err != nil {
				return "", err
			}
			onRelist(evs)
			return rv, nil
		},
	}
}
