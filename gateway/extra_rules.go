package gateway

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/strategy"
)

// RulesAnnotationPrefix starts the annotation in which a Router records
// the rules it owns in a route (see RulesAnnotation). A GitOps tool that
// applies the route should ignore it, like the claims.
const RulesAnnotationPrefix = "upshift.dev/rules-"

// RuleRole is the part an extra rule plays; it ends the rule's name (see
// ExtraRuleName). The zero value names no role.
type RuleRole string

// The extra rules, in the order a Router lists them: the split rule goes
// right before the user's rule, the others where precedence.go places
// them.
const (
	// RoleHeader sends the requests of the header route to the canary.
	RoleHeader RuleRole = "header"
	// RoleStickyCanary sends sessions whose ticket is at most the canary's
	// weight to the canary.
	RoleStickyCanary RuleRole = "sticky-canary"
	// RoleStickyStable sends sessions whose ticket is above the canary's
	// weight to the stable side.
	RoleStickyStable RuleRole = "sticky-stable"
	// RoleSplit splits the remaining requests by the weights: with sticky
	// sessions it hands out tickets, with a mirror it copies requests.
	RoleSplit RuleRole = "split"
)

// extrasID is the 16 hex digits that name a Router's extra objects in a
// route of namespace ns: those of its claim (ClaimAnnotation).
func extrasID(ns string, a, b Backend) string {
	return strings.TrimPrefix(ClaimAnnotation(ns, a, b), ClaimAnnotationPrefix)
}

// RulesAnnotation returns the annotation key in which the Router for
// backends a and b records its extra rules in a route of namespace ns:
// RulesAnnotationPrefix and the 16 hex digits of ClaimAnnotation. Its value
// is JSON: {"canary": side, "extras": the strategy.TrafficExtras
// programmed, "rules": [{"role", "sha256"}], "mirrorService": name}, the
// sha256 of each extra rule's canonical JSON (its name left out, Gateway
// API defaults filled in).
func RulesAnnotation(ns string, a, b Backend) string {
	return RulesAnnotationPrefix + extrasID(ns, a, b)
}

// ExtraRuleName returns the name of the extra rule with role in a route of
// namespace ns, for backends a and b: "upshift-<16 hex digits>-<role>".
func ExtraRuleName(ns string, a, b Backend, role RuleRole) string {
	return extraRulePrefix(extrasID(ns, a, b)) + string(role)
}

// OwnedRuleName is ExtraRuleName under its former name.
//
// Deprecated: use ExtraRuleName.
func OwnedRuleName(ns string, a, b Backend, role RuleRole) string {
	return ExtraRuleName(ns, a, b, role)
}

// MirrorServiceName returns the name of the TraefikService that carries a
// mirror (MirrorTraefikService) in namespace ns: "upshift-<16 hex
// digits>-mirror".
func MirrorServiceName(ns string, a, b Backend) string {
	return extraRulePrefix(extrasID(ns, a, b)) + "mirror"
}

func extraRulePrefix(id string) string { return "upshift-" + id + "-" }

// rulesRecord is the value of the rules annotation.
type rulesRecord struct {
	Canary        strategy.Side          `json:"canary"`
	Extras        strategy.TrafficExtras `json:"extras"`
	Rules         []ruleHash             `json:"rules"`
	MirrorService string                 `json:"mirrorService,omitempty"`
}

type ruleHash struct {
	Role   RuleRole `json:"role"`
	SHA256 string   `json:"sha256"`
}

func (r *rulesRecord) hash(role RuleRole) string {
	for _, h := range r.Rules {
		if h.Role == role {
			return h.SHA256
		}
	}
	return ""
}

func (r *rulesRecord) roleOf(hash string) (RuleRole, bool) {
	for _, h := range r.Rules {
		if h.SHA256 == hash {
			return h.Role, true
		}
	}
	return "", false
}

// readRecord returns the record under key, nil when there is none or it
// does not decode (then no unnamed rule is recognised as owned, and a
// rule with an extra-rule name is another writer's).
func readRecord(annotations map[string]string, key string) *rulesRecord {
	raw, ok := annotations[key]
	if !ok {
		return nil
	}
	var rec rulesRecord
	if err := json.Unmarshal([]byte(raw), &rec); err != nil || len(rec.Rules) == 0 {
		return nil
	}
	return &rec
}

// ruleInfo is what recognition needs of one rule.
type ruleInfo struct {
	name  string
	named bool
	hash  string
}

// Roles classify the rules of a route.
const (
	roleUser    RuleRole = ""  // the user's rule
	roleForeign RuleRole = "-" // an extra-rule name with content that is not ours
)

// classify recognises the extra rules: a rule is the Router's when it
// carries an extra-rule name and the hash recorded for that role, or, in a
// route where no rule has a name (a CRD that prunes them), a recorded
// hash. A rule with an extra-rule name
// and another hash is another writer's: roleForeign, and the first such is
// returned as a conflict. Every other rule is the user's.
func classify(infos []ruleInfo, id string, rec *rulesRecord) ([]RuleRole, *ExtraRuleConflictError) {
	prefix := extraRulePrefix(id)
	roles := make([]RuleRole, len(infos))
	used := map[RuleRole]bool{}
	var conflict *ExtraRuleConflictError
	// A route whose rules have names is on a CRD that keeps them: there an
	// unnamed rule is the user's, whatever its content.
	named := false
	for _, in := range infos {
		named = named || in.named
	}
	for i, in := range infos {
		switch {
		case in.named && strings.HasPrefix(in.name, prefix):
			role := RuleRole(strings.TrimPrefix(in.name, prefix))
			if rec != nil && !used[role] && rec.hash(role) == in.hash {
				roles[i], used[role] = role, true
				continue
			}
			roles[i] = roleForeign
			if conflict == nil {
				conflict = &ExtraRuleConflictError{Rule: i, Name: in.name}
			}
		case !named && rec != nil:
			if role, ok := rec.roleOf(in.hash); ok && !used[role] {
				roles[i], used[role] = role, true
			}
		}
	}
	return roles, conflict
}

// complete reports whether every rule rec lists was recognised.
func complete(roles []RuleRole, rec *rulesRecord) bool {
	if rec == nil {
		return false
	}
	for _, h := range rec.Rules {
		found := false
		for _, r := range roles {
			found = found || r == h.Role
		}
		if !found {
			return false
		}
	}
	return true
}

// userRefs keeps the refs of the user's rules; owned and foreign rules
// become empty slots, so rule indexes stay those of spec.rules.
func userRefs(refs ruleRefs, roles []RuleRole) ruleRefs {
	out := make(ruleRefs, len(refs))
	for i := range refs {
		if roles[i] == roleUser {
			out[i] = refs[i]
		}
	}
	return out
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// extrasAsk is what one SetRoutes asks of one route.
type extrasAsk struct {
	id      string
	key     string // the rules annotation
	ns      string
	a, b    *Backend
	weights rollout.Weights
	canary  strategy.Side
	extras  strategy.TrafficExtras
	mirror  MirrorMode
	// traefik is the TraefikService the stable side's mirrored refs
	// point at; empty unless a mirror goes through one.
	traefik string
	// peers are the other routes whose rules compete with this route's
	// for the same requests (see precedence.go).
	peers []peerRoute
}

// sides returns the stable and the canary backends.
func (s *extrasAsk) sides() (stable, canary *Backend) {
	if s.canary == strategy.SideB {
		return s.a, s.b
	}
	return s.b, s.a
}

func (s *extrasAsk) theta() int32 { return s.weights.Of(s.canary) }

// kindOps adapts applyExtraRules to a kind of route rule.
type kindOps[T any] struct {
	name  func(*T) *gwv1.SectionName
	canon func(r *T, withName bool) []byte
	refs  func([]T) ruleRefs
	copy  func([]T) []T
	// build returns the extra rules for the user's rule r of rules.
	build  func(rules []T, r int, s *extrasAsk) ([]T, []RuleRole, error)
	limits func([]T) error
	// spec is a rule's matches as precedence sees them.
	spec func(*T) ruleSpec
}

func infosOf[T any](ops *kindOps[T], rules []T) []ruleInfo {
	out := make([]ruleInfo, len(rules))
	for i := range rules {
		if n := ops.name(&rules[i]); n != nil {
			out[i].name, out[i].named = string(*n), true
		}
		out[i].hash = sha(ops.canon(&rules[i], false))
	}
	return out
}

// applyExtraRules rewrites rules and the annotations in m for s: the two
// weights of the user's rule, the extra rules placed around it (none
// when s.extras is zero), and the record. A route that already is as s
// asks (by canonical content, so defaults an API server fills in count as
// equal) is not changed. It reports whether anything changed, and changes
// nothing when it returns an error.
func applyExtraRules[T any](ops *kindOps[T], m *metav1.ObjectMeta, rules *[]T, s *extrasAsk) (bool, error) {
	old := *rules
	rec := readRecord(m.Annotations, s.key)
	roles, conflict := classify(infosOf(ops, old), s.id, rec)
	if conflict != nil {
		return false, conflict
	}
	work := ops.copy(old)
	refs := userRefs(ops.refs(work), roles)
	if _, err := setWeights(refs, s.a, s.b, s.ns, s.weights.A, s.weights.B); err != nil {
		return false, err
	}
	var out []T
	var next *rulesRecord
	if s.extras.IsZero() {
		for i := range work {
			if roles[i] == roleUser {
				out = append(out, work[i])
			}
		}
	} else {
		r, n := -1, 0
		for i, rr := range refs {
			if rr != nil && holdsBoth(rr, s.a, s.b, s.ns) {
				if r < 0 {
					r = i
				}
				n++
			}
		}
		if n > 1 {
			return false, &UnsupportedError{Extra: "traffic extras", Reason: fmt.Sprintf("%d rules hold both backends; extras need exactly one", n)}
		}
		owned, extraRoles, err := ops.build(work, r, s)
		if err != nil {
			return false, err
		}
		// The split rule goes right before R; the header and sticky rules
		// where precedence.go says they take only R's requests.
		var user []int
		pl := placement{r: -1, peers: s.peers, index: func(k int) int { return user[k] }}
		for i := range work {
			if roles[i] == roleUser {
				if i == r {
					pl.r = len(user)
				}
				user = append(user, i)
				pl.user = append(pl.user, ops.spec(&work[i]))
			}
		}
		specs := make([]ruleSpec, len(owned))
		var split, extra []T
		for k := range owned {
			specs[k] = ops.spec(&owned[k])
			if extraRoles[k] == RoleSplit {
				split = append(split, owned[k])
			} else {
				extra = append(extra, owned[k])
			}
		}
		at, err := pl.place(specs, extraRoles)
		if err != nil {
			return false, err
		}
		for k, i := range user {
			if k == at {
				out = append(out, extra...)
			}
			if k == pl.r {
				out = append(out, split...)
			}
			out = append(out, work[i])
		}
		if at == len(user) {
			out = append(out, extra...)
		}
		if err := ops.limits(out); err != nil {
			return false, err
		}
		next = &rulesRecord{Canary: s.canary, Extras: s.extras, MirrorService: s.traefik}
		if next.Canary == "" {
			next.Canary = strategy.SideA
		}
		for k := range owned {
			next.Rules = append(next.Rules, ruleHash{Role: extraRoles[k], SHA256: sha(ops.canon(&owned[k], false))})
		}
	}
	var val string
	if next != nil {
		b, err := json.Marshal(next)
		if err != nil {
			return false, fmt.Errorf("gateway: encoding %s: %w", s.key, err)
		}
		val = string(b)
	}
	cur, has := m.Annotations[s.key]
	annChanged := (next == nil && has) || (next != nil && cur != val)
	if !annChanged && sameRules(ops, old, out) {
		return false, nil
	}
	*rules = out
	if next == nil {
		delete(m.Annotations, s.key)
	} else {
		if m.Annotations == nil {
			m.Annotations = map[string]string{}
		}
		m.Annotations[s.key] = val
	}
	return true, nil
}

func sameRules[T any](ops *kindOps[T], a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		// A rule stored without a name (a CRD that prunes rule names)
		// equals its named version.
		if string(ops.canon(&a[i], ops.name(&a[i]) != nil)) != string(ops.canon(&b[i], ops.name(&a[i]) != nil)) {
			return false
		}
	}
	return true
}

// limits of Gateway API v1 routes.
const (
	maxRules        = 16
	maxRefsPerRule  = 16
	maxHeaders      = 16
	maxRouteMatches = 128
)

// checkLimits checks the limits common to both kinds; nm and nh give a
// rule's number of matches (as the API server counts them) and the header
// matches of its match j.
func checkLimits(n int, refs func(i int) int, nm func(i int) int, nh func(i, j int) int) error {
	if n > maxRules {
		return &RuleLimitError{Field: "spec.rules", Need: n, Max: maxRules}
	}
	total := 0
	for i := 0; i < n; i++ {
		if k := refs(i); k > maxRefsPerRule {
			return &RuleLimitError{Field: fmt.Sprintf("spec.rules[%d].backendRefs", i), Need: k, Max: maxRefsPerRule}
		}
		for j := 0; j < nm(i); j++ {
			if k := nh(i, j); k > maxHeaders {
				return &RuleLimitError{Field: fmt.Sprintf("spec.rules[%d].matches[%d].headers", i, j), Need: k, Max: maxHeaders}
			}
		}
		total += max(nm(i), 1)
	}
	if total > maxRouteMatches {
		return &RuleLimitError{Field: "spec.rules[*].matches", Need: total, Max: maxRouteMatches}
	}
	return nil
}
