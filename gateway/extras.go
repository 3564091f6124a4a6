package gateway

import (
	"context"
	"errors"
	"fmt"
	"regexp"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/strategy"
)

// MirrorMode says how a Router programs a mirror (Config.Mirror). The zero
// value is MirrorGatewayAPI.
type MirrorMode string

const (
	// MirrorGatewayAPI (the zero value) programs a mirror as a Gateway API
	// RequestMirror filter with a fraction: conformance Extended, features
	// HTTPRouteRequestMirror and HTTPRouteRequestPercentageMirror. SetRoutes
	// programs it only when the GatewayClass of every parent Gateway lists
	// both in status.supportedFeatures, and otherwise refuses with an
	// *UnsupportedError naming the class and the missing features, writing
	// nothing: a data plane that does not implement the filter may accept
	// the route and answer every request of the rule with an error. The
	// Gateway API v1.3.0 conformance reports of Envoy Gateway v1.5.0, Istio
	// 1.26.1 and NGINX Gateway Fabric 2.2.0 list both features; Traefik
	// v3.5's lists them as unsupported (use MirrorTraefikService there).
	MirrorGatewayAPI MirrorMode = ""
	// MirrorTraefikService programs a mirror as a Traefik TraefikService
	// (traefik.io/v1alpha1, spec.mirroring) that the Router owns, named
	// MirrorServiceName, which the split rule's stable backendRef points at
	// (group traefik.io, kind TraefikService): implementation-specific,
	// for Traefik with its kubernetesCRD provider enabled. It needs a Router
	// built with NewRouter; with NewRouterForClientset SetRoutes refuses a
	// mirror with an *UnsupportedError.
	MirrorTraefikService MirrorMode = "TraefikService"
)

// The GatewayClass features a MirrorGatewayAPI mirror needs.
const (
	FeatureRequestMirror           = "HTTPRouteRequestMirror"
	FeatureRequestPercentageMirror = "HTTPRouteRequestPercentageMirror"
)

var _ rollout.ExtrasRouter = (*Router)(nil)

// SetRoutes writes the weights and the traffic extras (a header route, a
// mirror, sticky sessions) into every managed route, each route in one
// update. Every route is read and checked, and the mirror's prerequisites
// too, before any is written; any refusal is rollout.Permanent and leaves
// every route as it was. rs.Extras' zero value removes every extra.
//
// The user's rule (the one that holds both backends) keeps its content and
// gets only its weights, so it remains the fallback. The extras are rules
// the Router owns, named ExtraRuleName, copies of the user's rule with their
// own matches, placed by Gateway API's precedence so that they take only
// the requests it would have taken, and recorded with a hash each in
// RulesAnnotation. An extra rule that another writer edited is never
// overwritten; extra rules another writer dropped are written again.
//
// Refused before anything is written: more rules, refs or matches than
// Gateway API allows (*RuleLimitError); a header the user's rule already
// matches on (*HeaderClashError); a ResponseHeaderModifier of that rule
// that sets Set-Cookie (*SetCookieClashError); an extra rule edited by
// another writer (*ExtraRuleConflictError); two rules holding both
// backends, or an extra the route kind or gateway cannot carry
// (*UnsupportedError, matches rollout.ErrUnsupported); a header or sticky
// rule that would take requests another rule wins today (*PrecedenceError),
// or a header route that another rule shadows (*ShadowedError).
//
// Permissions beyond get and update on the routes: header routes and
// sticky sessions list the routes of their kind in Config.PeerNamespaces
// (*PeerListError names a missing one); a MirrorGatewayAPI mirror gets
// Gateways and GatewayClasses; MirrorTraefikService needs get, create,
// update and delete on traefikservices. See docs/design/gateway.md for the
// layout, shared routes, header routes, mirrors and sticky sessions.
func (r *Router) SetRoutes(ctx context.Context, rs rollout.Routes) error {
	return r.setRoutes(ctx, rs, nil)
}

// setRoutes is SetRoutes; with also, the write of also's route makes
// also's edit in the same update, and that route is written last.
func (r *Router) setRoutes(ctx context.Context, rs rollout.Routes, also *routeEdit) error {
	if err := validateRoutes(rs); err != nil {
		return rollout.Permanent(err)
	}
	if err := r.checkRetryMiddleware(ctx); err != nil { // retry.go
		return err
	}
	mirror := rs.Extras.MirrorPercent > 0
	traefik := r.cfg.Mirror == MirrorTraefikService
	peers := map[RouteRef][]peerRoute{}
	for _, ref := range r.cfg.Routes {
		rt, err := r.api.get(ctx, ref)
		if err != nil {
			return apiError(err, ref)
		}
		if err := r.checkWriter(ctx, ref, rt); err != nil {
			return err
		}
		if err := also.check(ref, rt); err != nil {
			return err
		}
		if _, err := r.applyRetry(ref, rt); err != nil {
			return err
		}
		if mirror && traefik {
			if err := r.checkTraefikMirror(ref); err != nil {
				return rollout.Permanent(err)
			}
		}
		s := r.askFor(ref, rs)
		if s.peers, err = r.peersOf(ctx, ref, rt, rs.Extras); err != nil {
			return err
		}
		peers[ref.key()] = s.peers
		if _, err := r.applyExtras(rt, s); err != nil {
			return rollout.Permanent(withRoute(err, ref))
		}
		if mirror && !traefik && rt.http != nil {
			if err := r.checkMirrorFeatures(ctx, ref, rt); err != nil {
				return err
			}
		}
	}
	if mirror && traefik {
		for _, ref := range r.mirrorRoutes() {
			if err := r.upsertMirror(ctx, ref, rs.Canary, rs.Extras.MirrorPercent); err != nil {
				return err
			}
		}
	}
	for _, ref := range also.order(r.cfg.Routes) {
		s, edit := r.askFor(ref, rs), also.on(ref)
		s.peers = peers[ref.key()]
		var last route
		err := updateRoute(ctx, r.api, ref, r.cfg.MaxConflictRetries, func(rt route) (bool, error) {
			last = rt
			if err := r.checkWriter(ctx, ref, rt); err != nil {
				return false, err
			}
			// The retry first, so that the extra rules copy it.
			retried, err := r.applyRetry(ref, rt)
			if err != nil {
				return false, err
			}
			changed, err := r.applyExtras(rt, s)
			if err != nil {
				return false, rollout.Permanent(withRoute(err, ref))
			}
			return withEdit(changed || retried, rt, edit)
		})
		if err != nil {
			return err
		}
		if err := r.checkRetryKept(ref, last); err != nil {
			return err
		}
	}
	if !mirror && traefik && r.objs != nil {
		// Deleted by Routes once the routes that no longer point at it
		// are applied (sweepMirrors).
		r.mu.Lock()
		r.sweep = true
		r.mu.Unlock()
	}
	return nil
}

// Routes reports the weights and their acceptance as Weights does, and
// the extras programmed: those RulesAnnotation records, when every route
// has every extra rule exactly as SetRoutes would write it for the current
// weights (and, with MirrorTraefikService, the TraefikService with the
// expected spec). Otherwise, say after another writer dropped or edited an
// extra rule, it reports no extras (zero Extras, empty Canary), so the
// caller programs them again.
//
// With MirrorTraefikService, Routes deletes the Router's TraefikService
// once no managed route of its namespace points at it and each of them is
// accepted, and settled, for its current generation (see SetRoutes,
// Mirrors).
func (r *Router) Routes(ctx context.Context) (rollout.RoutesStatus, error) {
	var out rollout.RoutesStatus
	found, first := true, true
	read := map[RouteRef]route{}
	st, err := r.weights(ctx, func(ref RouteRef, rt route) error {
		read[ref.key()] = rt
		if !found {
			return nil
		}
		side, x, ok, err := r.programmed(ctx, ref, rt)
		switch {
		case err != nil:
			return err
		case !ok:
			found = false
		case first:
			out.Canary, out.Extras, first = side, x, false
		case side != out.Canary || !x.Equal(out.Extras):
			found = false
		}
		return nil
	})
	if err != nil {
		return rollout.RoutesStatus{}, err
	}
	out.RouteStatus = st
	if !found {
		out.Canary, out.Extras = "", strategy.TrafficExtras{}
	}
	if err := r.sweepMirrors(ctx, read); err != nil {
		return rollout.RoutesStatus{}, err
	}
	return out, nil
}

// programmed returns the extras recorded on rt when the route holds them
// exactly.
func (r *Router) programmed(ctx context.Context, ref RouteRef, rt route) (strategy.Side, strategy.TrafficExtras, bool, error) {
	var none strategy.TrafficExtras
	rec := readRecord(rt.meta().Annotations, RulesAnnotation(ref.Namespace, r.cfg.A, r.cfg.B))
	if rec == nil {
		return "", none, false, nil
	}
	roles, conflict := r.classifyRoute(ref, rt, rec)
	if conflict != nil || !complete(roles, rec) {
		return "", none, false, nil
	}
	wa, wb, agree, err := readWeights(userRefs(rt.rules(), roles), &r.cfg.A, &r.cfg.B, ref.Namespace)
	if err != nil || !agree {
		return "", none, false, nil
	}
	s := r.askFor(ref, rollout.Routes{Weights: rollout.Weights{A: wa, B: wb}, Canary: rec.Canary, Extras: rec.Extras})
	s.traefik = rec.MirrorService
	if s.peers, err = r.peersOf(ctx, ref, rt, rec.Extras); err != nil {
		return "", none, false, err
	}
	// A rule another writer added since (in this route or another on the
	// same listener) may now shadow the header route or lose requests to
	// an extra rule: then SetRoutes would refuse, and nothing is
	// reported programmed.
	if changed, err := r.applyExtras(rt.deepCopy(), s); err != nil || changed {
		return "", none, false, nil
	}
	if rec.MirrorService != "" {
		ok, err := r.mirrorPresent(ctx, ref, rec.Canary, rec.Extras.MirrorPercent)
		if err != nil || !ok {
			return "", none, false, err
		}
	}
	return rec.Canary, rec.Extras, true, nil
}

// setWeightsIn writes w into rt: with the extra rules rebuilt for w when
// rt holds every rule its record lists, or else into the user's rules
// alone.
func (r *Router) setWeightsIn(ctx context.Context, ref RouteRef, rt route, w rollout.Weights) (bool, error) {
	rec := readRecord(rt.meta().Annotations, RulesAnnotation(ref.Namespace, r.cfg.A, r.cfg.B))
	roles, conflict := r.classifyRoute(ref, rt, rec)
	if rec != nil && conflict == nil && complete(roles, rec) {
		s := r.askFor(ref, rollout.Routes{Weights: w, Canary: rec.Canary, Extras: rec.Extras})
		s.traefik = rec.MirrorService
		peers, err := r.peersOf(ctx, ref, rt, rec.Extras)
		if err != nil {
			return false, err
		}
		s.peers = peers
		changed, err := r.applyExtras(rt, s)
		var pe *PrecedenceError
		var se *ShadowedError
		if errors.As(err, &pe) || errors.As(err, &se) {
			// A rule added since makes the extra rules unsafe: the weights
			// still move, and the extra rules go, so that they take no
			// request another rule now wins (Routes reports no extras).
			s.extras, s.traefik = strategy.TrafficExtras{}, ""
			return r.applyExtras(rt, s)
		}
		return changed, err
	}
	return setWeights(userRefs(rt.rules(), roles), &r.cfg.A, &r.cfg.B, ref.Namespace, w.A, w.B)
}

// userRules returns the refs of rt's rules with the owned (and foreign
// owned-named) rules left empty.
func (r *Router) userRules(ref RouteRef, rt route) ruleRefs {
	rec := readRecord(rt.meta().Annotations, RulesAnnotation(ref.Namespace, r.cfg.A, r.cfg.B))
	roles, _ := r.classifyRoute(ref, rt, rec)
	return userRefs(rt.rules(), roles)
}

func (r *Router) classifyRoute(ref RouteRef, rt route, rec *rulesRecord) ([]RuleRole, *ExtraRuleConflictError) {
	id := extrasID(ref.Namespace, r.cfg.A, r.cfg.B)
	if rt.http != nil {
		return classify(infosOf(&httpOps, rt.http.Spec.Rules), id, rec)
	}
	return classify(infosOf(&grpcOps, rt.grpc.Spec.Rules), id, rec)
}

func (r *Router) askFor(ref RouteRef, rs rollout.Routes) *extrasAsk {
	s := &extrasAsk{
		id:      extrasID(ref.Namespace, r.cfg.A, r.cfg.B),
		key:     RulesAnnotation(ref.Namespace, r.cfg.A, r.cfg.B),
		ns:      ref.Namespace,
		a:       &r.cfg.A,
		b:       &r.cfg.B,
		weights: rs.Weights,
		canary:  rs.Canary,
		extras:  rs.Extras,
		mirror:  r.cfg.Mirror,
	}
	if s.canary == "" {
		s.canary = strategy.SideA
	}
	if rs.Extras.MirrorPercent > 0 && r.cfg.Mirror == MirrorTraefikService {
		s.traefik = MirrorServiceName(ref.Namespace, r.cfg.A, r.cfg.B)
	}
	return s
}

func (r *Router) applyExtras(rt route, s *extrasAsk) (bool, error) {
	if rt.http != nil {
		return applyExtrasHTTP(rt.http, s)
	}
	return applyExtrasGRPC(rt.grpc, s)
}

func (r route) deepCopy() route {
	if r.http != nil {
		return route{http: r.http.DeepCopy()}
	}
	return route{grpc: r.grpc.DeepCopy()}
}

// validateRoutes checks what SetRoutes is asked, naming the field.
func validateRoutes(rs rollout.Routes) error {
	w := rs.Weights
	if w.A < 0 || w.B < 0 || w.A+w.B != 100 {
		return fmt.Errorf("%w: weights A=%d B=%d must be non-negative and sum to 100", ErrInvalid, w.A, w.B)
	}
	switch rs.Canary {
	case "", strategy.SideA, strategy.SideB:
	default:
		return fmt.Errorf("%w: canary: %q is not A or B", ErrInvalid, rs.Canary)
	}
	x := rs.Extras
	if x.MirrorPercent < 0 || x.MirrorPercent > 100 {
		return fmt.Errorf("%w: extras.mirrorPercent: %d is not in 0..100", ErrInvalid, x.MirrorPercent)
	}
	if h := x.HeaderRoute; h != nil {
		for i, m := range h.Matches {
			p := fmt.Sprintf("extras.headerRoute.matches[%d]", i)
			switch m.Type {
			case "", strategy.HeaderExact, strategy.HeaderCookie:
			case strategy.HeaderRegularExpression:
				if _, err := regexp.Compile(m.Value); err != nil {
					return fmt.Errorf("%w: %s.value: %w", ErrInvalid, p, err)
				}
			default:
				return fmt.Errorf("%w: %s.type: %q is not Exact, RegularExpression or Cookie", ErrInvalid, p, m.Type)
			}
			if m.Name == "" || m.Value == "" {
				return fmt.Errorf("%w: %s: name and value are required", ErrInvalid, p)
			}
		}
	}
	if st := x.Sticky; st != nil {
		if st.Run == "" || !cookieSafe(st.Run) {
			return fmt.Errorf("%w: extras.sticky.run: %q must be a non-empty cookie value", ErrInvalid, st.Run)
		}
		if st.Cookie.CookieName != "" && !cookieSafe(st.Cookie.CookieName) {
			return fmt.Errorf("%w: extras.sticky.cookie.cookieName: %q is not a cookie name", ErrInvalid, st.Cookie.CookieName)
		}
		if len(st.Grid) == 0 || len(st.Grid) > maxRefsPerRule {
			return fmt.Errorf("%w: extras.sticky.grid: %d values; want 1..%d", ErrInvalid, len(st.Grid), maxRefsPerRule)
		}
		prev := int32(0)
		for i, g := range st.Grid {
			if g <= prev || g > 100 {
				return fmt.Errorf("%w: extras.sticky.grid[%d]: %d; want ascending values in 1..100", ErrInvalid, i, g)
			}
			prev = g
		}
		if prev != 100 {
			return fmt.Errorf("%w: extras.sticky.grid[%d]: %d; the last value must be 100", ErrInvalid, len(st.Grid)-1, prev)
		}
	}
	return nil
}

// cookieSafe reports whether s can be a cookie name or value as is.
func cookieSafe(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || c == '"' || c == ',' || c == ';' || c == '\\' || c == '=' {
			return false
		}
	}
	return true
}

// gatewayReader reads Gateways and GatewayClasses.
type gatewayReader interface {
	gateway(ctx context.Context, ns, name string) (*gwv1.Gateway, error)
	gatewayClass(ctx context.Context, name string) (*gwv1.GatewayClass, error)
}

type crGateways struct{ c client.Client }

func (g crGateways) gateway(ctx context.Context, ns, name string) (*gwv1.Gateway, error) {
	var gw gwv1.Gateway
	return &gw, g.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &gw)
}

func (g crGateways) gatewayClass(ctx context.Context, name string) (*gwv1.GatewayClass, error) {
	var gc gwv1.GatewayClass
	return &gc, g.c.Get(ctx, types.NamespacedName{Name: name}, &gc)
}

type csGateways struct{ cs versioned.Interface }

func (g csGateways) gateway(ctx context.Context, ns, name string) (*gwv1.Gateway, error) {
	return g.cs.GatewayV1().Gateways(ns).Get(ctx, name, metav1.GetOptions{})
}

func (g csGateways) gatewayClass(ctx context.Context, name string) (*gwv1.GatewayClass, error) {
	return g.cs.GatewayV1().GatewayClasses().Get(ctx, name, metav1.GetOptions{})
}

// checkMirrorFeatures checks that the GatewayClass of every parent of rt
// lists the features of a RequestMirror with a fraction.
func (r *Router) checkMirrorFeatures(ctx context.Context, ref RouteRef, rt route) error {
	parents := rt.parentRefs()
	if len(parents) == 0 {
		return rollout.Permanent(&UnsupportedError{Route: ref, Extra: "mirror", Reason: "the route has no parentRefs, so no GatewayClass says it supports mirrors"})
	}
	checked := map[string]bool{}
	for _, p := range parents {
		group, kind, ns, _ := parentOf(p, ref.Namespace)
		if group != gwv1.GroupName || kind != "Gateway" {
			return rollout.Permanent(&UnsupportedError{Route: ref, Extra: "mirror", Reason: fmt.Sprintf(
				"parent %s/%s %s is not a Gateway, so no GatewayClass says it supports mirrors", group, kind, p.Name)})
		}
		gw, err := r.gws.gateway(ctx, ns, string(p.Name))
		if err != nil {
			return readError(ref, "Gateway "+ns+"/"+string(p.Name), err)
		}
		class := string(gw.Spec.GatewayClassName)
		if checked[class] {
			continue
		}
		checked[class] = true
		gc, err := r.gws.gatewayClass(ctx, class)
		if err != nil {
			return readError(ref, "GatewayClass "+class, err)
		}
		var missing []string
		for _, f := range []string{FeatureRequestMirror, FeatureRequestPercentageMirror} {
			has := false
			for _, sf := range gc.Status.SupportedFeatures {
				has = has || string(sf.Name) == f
			}
			if !has {
				missing = append(missing, f)
			}
		}
		if len(missing) > 0 {
			return rollout.Permanent(&UnsupportedError{Route: ref, Extra: "mirror", GatewayClass: class, Missing: missing})
		}
	}
	return nil
}
