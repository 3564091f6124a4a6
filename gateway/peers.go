package gateway

import (
	"context"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/upshift-dev/upshift/strategy"
)

// needsPeers reports whether extras add extra rules that rank above the
// split rule (a header route or sticky sessions), which must be placed
// among the other routes' rules too.
func needsPeers(x strategy.TrafficExtras) bool {
	return (x.HeaderRoute != nil && len(x.HeaderRoute.Matches) > 0) || x.Sticky != nil
}

// PeerListError: the Router could not list the routes that may share the
// managed route's listeners, which it must read before it programs a
// header route or sticky sessions (see Config.PeerNamespaces). Namespace
// is the namespace listed ("" for all). It wraps the API server's error.
type PeerListError struct {
	Route     RouteRef
	Namespace string
	Err       error
}

func (e *PeerListError) Error() string {
	where := "in every namespace"
	if e.Namespace != "" {
		where = "in namespace " + e.Namespace
	}
	msg := fmt.Sprintf("gateway: %s: listing %ss %s, to place the extra rules among other routes' rules: %v", e.Route, e.Route.kind(), where, e.Err)
	if apierrors.IsForbidden(e.Err) {
		msg += fmt.Sprintf(" (grant list on %ss there, or set Config.PeerNamespaces to the namespaces your Gateways admit routes from)", strings.ToLower(e.Route.kind()))
	}
	return msg
}

func (e *PeerListError) Unwrap() error { return e.Err }

// peersOf returns the other routes that share a listener of rt and
// compete with it on hostnames, with their rules; none unless x needs
// them.
func (r *Router) peersOf(ctx context.Context, ref RouteRef, rt route, x strategy.TrafficExtras) ([]peerRoute, error) {
	if !needsPeers(x) {
		return nil, nil
	}
	nss := r.cfg.PeerNamespaces
	if nss == nil {
		nss = []string{""}
	}
	self := rt.meta()
	var out []peerRoute
	for _, ns := range nss {
		list, err := r.api.list(ctx, ref.kind(), ns)
		if err != nil {
			return nil, &PeerListError{Route: ref, Namespace: ns, Err: err}
		}
		for _, p := range list {
			m := p.meta()
			if m.Namespace == ref.Namespace && m.Name == ref.Name {
				continue
			}
			if !sharesListener(rt.parentRefs(), ref.Namespace, p.parentRefs(), m.Namespace) || !competes(rt.hostnames(), p.hostnames()) {
				continue
			}
			pr := peerRoute{
				ref:   RouteRef{Kind: ref.kind(), Namespace: m.Namespace, Name: m.Name},
				older: olderRoute(m.CreationTimestamp.Time, m.Namespace, m.Name, self.CreationTimestamp.Time, self.Namespace, self.Name),
			}
			// In another route this Router manages, its own rules and the
			// rule it splits move with these (the same weights, the same
			// extras, the same backends): they take nothing from them.
			managed := false
			for _, c := range r.cfg.Routes {
				managed = managed || c.key() == pr.ref.key()
			}
			own := extraRulePrefix(extrasID(m.Namespace, r.cfg.A, r.cfg.B))
			refs := p.rules()
			skip := func(i int, name *gwv1.SectionName) bool {
				return managed && ((name != nil && strings.HasPrefix(string(*name), own)) || holdsBoth(refs[i], &r.cfg.A, &r.cfg.B, m.Namespace))
			}
			for i, spec := range p.specs() {
				if skip(i, p.ruleName(i)) {
					spec = ruleSpec{}
				}
				pr.rules = append(pr.rules, spec)
			}
			out = append(out, pr)
		}
	}
	return out, nil
}

// specs is every rule of r as precedence sees it.
func (r route) specs() []ruleSpec {
	var out []ruleSpec
	if r.http != nil {
		for i := range r.http.Spec.Rules {
			out = append(out, specHTTPRule(&r.http.Spec.Rules[i]))
		}
		return out
	}
	for i := range r.grpc.Spec.Rules {
		out = append(out, specGRPCRule(&r.grpc.Spec.Rules[i]))
	}
	return out
}

// ruleName is the name of rule i of r, nil when it has none.
func (r route) ruleName(i int) *gwv1.SectionName {
	if r.http != nil {
		return r.http.Spec.Rules[i].Name
	}
	return r.grpc.Spec.Rules[i].Name
}
