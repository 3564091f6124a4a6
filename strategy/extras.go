package strategy

import (
	"regexp"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// HeaderMatchType says how a HeaderMatch compares a request.
//
// +kubebuilder:validation:Enum="";Exact;RegularExpression;Cookie
type HeaderMatchType string

const (
	// HeaderExact (also the zero value): the header's value equals Value.
	// Gateway API conformance: Core.
	HeaderExact HeaderMatchType = "Exact"
	// HeaderRegularExpression: the header's value matches Value, an RE2
	// regular expression (Go's regexp syntax). Gateway API conformance:
	// Implementation-specific (most gateways use RE2, some anchor it).
	HeaderRegularExpression HeaderMatchType = "RegularExpression"
	// HeaderCookie: the request carries the cookie named Name with the
	// value Value. Routers match it as a regular expression on the Cookie
	// header, anchored at cookie boundaries.
	HeaderCookie HeaderMatchType = "Cookie"
)

// HeaderMatch is one condition on a request. The zero value is not valid
// (Name is required).
//
// +kubebuilder:object:generate=true
type HeaderMatch struct {
	// How Value is compared: Exact (the default), RegularExpression, or
	// Cookie (Name is then the cookie's name).
	// +optional
	Type HeaderMatchType `json:"type,omitempty"`
	// The header's name (case-insensitive), or the cookie's name.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Name string `json:"name"`
	// The value, or the regular expression, to match.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=4096
	Value string `json:"value"`
}

// HeaderRoute sends every request that matches all of Matches to the canary,
// whatever the weight, and leaves the weight to split the rest: A/B testing,
// or internal users first.
//
// Load: the requests that match are load on the canary. The engine counts
// ExpectedPercent of the route's requests as matching; when it is unset it
// cannot know the share and counts all of them (100), so the header route is
// applied only once the canary's observed ready capacity covers the whole
// route. Declare ExpectedPercent to apply it on a smaller canary.
//
// +kubebuilder:object:generate=true
type HeaderRoute struct {
	// All must match (AND). An empty list clears the header route.
	// +optional
	// +kubebuilder:validation:MaxItems=8
	Matches []HeaderMatch `json:"matches,omitempty"`
	// The largest share of the route's requests, in percent, that may
	// match. Unset counts as 100.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	ExpectedPercent *int32 `json:"expectedPercent,omitempty"`
}

// share is the percent of requests the header route is counted as taking.
func (h *HeaderRoute) share() int32 {
	switch {
	case h == nil || len(h.Matches) == 0:
		return 0
	case h.ExpectedPercent == nil:
		return 100
	}
	return min(max(*h.ExpectedPercent, 0), 100)
}

// MirrorStep copies a share of the requests the weight sends to the stable
// side to the canary; the canary's answers are discarded, clients only see
// the stable side's. The copies are load on
// the canary: the engine applies a mirror only once the canary's observed
// ready capacity covers them on top of its own traffic.
//
// +kubebuilder:object:generate=true
type MirrorStep struct {
	// The percent of the stable side's requests copied to the canary; 0
	// stops mirroring.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	Percent int32 `json:"percent"`
}

// SetHeaderRoute returns a step that sends the requests matching every match
// to the canary (none: clears the header route). expected is the largest
// share of requests, in percent, that may match; a negative value leaves it
// unknown (counted as 100).
func SetHeaderRoute(expected int32, matches ...HeaderMatch) CanaryStep {
	h := &HeaderRoute{Matches: matches}
	if expected >= 0 {
		h.ExpectedPercent = &expected
	}
	return CanaryStep{SetHeaderRoute: h}
}

// SetMirror returns a step that copies percent of requests to the canary (0
// stops it).
func SetMirror(percent int32) CanaryStep { return CanaryStep{SetMirror: &MirrorStep{Percent: percent}} }

// SessionAffinity keeps each client session on one side while the weight
// moves: the router hands a new session a ticket (a cookie) and routes every
// request that carries it by the ticket, not by a draw. The share of
// sessions on the canary follows the weight, a session never moves from the
// canary back to the stable side while the rollout goes forward, and every
// session is back on the stable side when an abort ends. The weights a
// rollout walks through must be at most 16 distinct values (tickets are one
// backend reference each on the gateway); the engine moves the weight only
// to those values.
//
// The zero value is valid: cookie "upshift-session", 24 hours, path "/",
// SameSite Lax, HttpOnly.
//
// +kubebuilder:object:generate=true
type SessionAffinity struct {
	// The cookie's name. Default upshift-session.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	CookieName string `json:"cookieName,omitempty"`
	// How long a ticket holds (the cookie's Max-Age). Default 24h.
	// +optional
	MaxAge *metav1.Duration `json:"maxAge,omitempty"`
	// The cookie's Path. Default "/".
	// +optional
	Path string `json:"path,omitempty"`
	// The cookie's Domain; unset: the host that answered.
	// +optional
	Domain string `json:"domain,omitempty"`
	// The cookie is sent over HTTPS only.
	// +optional
	Secure bool `json:"secure,omitempty"`
	// Lax (default), Strict or None (needs secure).
	// +optional
	// +kubebuilder:validation:Enum="";Lax;Strict;None
	SameSite string `json:"sameSite,omitempty"`
}

// DefaultSessionCookie is the cookie name of a SessionAffinity without one.
const DefaultSessionCookie = "upshift-session"

// DefaultSessionMaxAge is how long a ticket holds without SessionAffinity.MaxAge.
const DefaultSessionMaxAge = 24 * time.Hour

// withDefaults returns the affinity with every default filled in.
func (a SessionAffinity) withDefaults() SessionAffinity {
	if a.CookieName == "" {
		a.CookieName = DefaultSessionCookie
	}
	if a.MaxAge == nil {
		a.MaxAge = &metav1.Duration{Duration: DefaultSessionMaxAge}
	}
	if a.Path == "" {
		a.Path = "/"
	}
	if a.SameSite == "" {
		a.SameSite = "Lax"
	}
	return a
}

// Sticky is the session affinity of one rollout as the router programs it.
// Every new session gets a ticket, a value of Grid drawn with probability
// proportional to its gap from the value below it (the first from 0), in
// cookie Cookie.CookieName as "<Run>.<ticket>". A request whose ticket is at
// most the canary's weight goes to the canary, any other to the stable side:
// the share of sessions on the canary is the weight, at every step, since a
// ticket never changes. Tickets of another run match nothing.
//
// +kubebuilder:object:generate=true
type Sticky struct {
	// Names this rollout's tickets: a cookie of an earlier rollout is a new
	// session.
	Run string `json:"run"`
	// The ticket values, ascending, the last one 100; at most 16.
	Grid []int32 `json:"grid"`
	// The cookie, with every default filled in.
	Cookie SessionAffinity `json:"cookie"`
}

// TrafficExtras is what a router programs beside the weights: a header
// route, a mirror and sticky sessions. The zero value programs none.
//
// +kubebuilder:object:generate=true
type TrafficExtras struct {
	// Requests matching go to the canary.
	// +optional
	HeaderRoute *HeaderRoute `json:"headerRoute,omitempty"`
	// The percent of the requests the weight sends to the stable side
	// that are copied to the canary.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	MirrorPercent int32 `json:"mirrorPercent,omitempty"`
	// Session affinity; the canary's weight is its threshold.
	// +optional
	Sticky *Sticky `json:"sticky,omitempty"`
}

// String describes x for people, as Plan names an extras hop: for example
// "header route x-beta=1 (at most 5%), mirror 20%, sticky sessions", or
// "no extras".
func (x TrafficExtras) String() string {
	var parts []string
	if h := x.HeaderRoute; h != nil && len(h.Matches) > 0 {
		var ms []string
		for _, m := range h.Matches {
			switch m.Type {
			case HeaderRegularExpression:
				ms = append(ms, m.Name+"~"+m.Value)
			case HeaderCookie:
				ms = append(ms, "cookie "+m.Name+"="+m.Value)
			default:
				ms = append(ms, m.Name+"="+m.Value)
			}
		}
		share := "share unknown, counted as 100%"
		if h.ExpectedPercent != nil {
			share = "at most " + itoa(h.share()) + "%"
		}
		parts = append(parts, "header route "+strings.Join(ms, " and ")+" ("+share+")")
	}
	if x.MirrorPercent > 0 {
		parts = append(parts, "mirror "+itoa(x.MirrorPercent)+"%")
	}
	if x.Sticky != nil {
		parts = append(parts, "sticky sessions")
	}
	if len(parts) == 0 {
		return "no extras"
	}
	return strings.Join(parts, ", ")
}

// UsesExtras reports whether s asks a router for extras: a header route or
// mirror step, or session affinity. A router that programs them
// (rollout.ExtrasRouter) is then required.
func UsesExtras(s Strategy) bool {
	if s == nil {
		return false
	}
	if s.Shared().SessionAffinity != nil {
		return true
	}
	var steps []CanaryStep
	switch c := s.(type) {
	case Canary:
		steps = c.Steps
	case *Canary:
		steps = c.Steps
	}
	{
		c := Canary{Steps: steps}
		for i := range c.Steps {
			if c.Steps[i].SetHeaderRoute != nil || c.Steps[i].SetMirror != nil {
				return true
			}
		}
	}
	return false
}

// IsZero reports whether x programs nothing.
func (x TrafficExtras) IsZero() bool {
	return (x.HeaderRoute == nil || len(x.HeaderRoute.Matches) == 0) && x.MirrorPercent == 0 && x.Sticky == nil
}

func (x TrafficExtras) headerShare() int32 { return x.HeaderRoute.share() }

// Equal reports whether x and y program the same thing. An empty header
// route is no header route.
func (x TrafficExtras) Equal(y TrafficExtras) bool {
	if x.MirrorPercent != y.MirrorPercent || !x.HeaderRoute.equal(y.HeaderRoute) {
		return false
	}
	switch {
	case x.Sticky == nil || y.Sticky == nil:
		return x.Sticky == y.Sticky
	}
	return x.Sticky.equal(y.Sticky)
}

func (h *HeaderRoute) equal(o *HeaderRoute) bool {
	hn, on := h == nil || len(h.Matches) == 0, o == nil || len(o.Matches) == 0
	if hn || on {
		return hn == on
	}
	if len(h.Matches) != len(o.Matches) || h.share() != o.share() ||
		(h.ExpectedPercent == nil) != (o.ExpectedPercent == nil) {
		return false
	}
	for i := range h.Matches {
		a, b := h.Matches[i], o.Matches[i]
		if a.Type == "" {
			a.Type = HeaderExact
		}
		if b.Type == "" {
			b.Type = HeaderExact
		}
		if a != b {
			return false
		}
	}
	return true
}

func (s *Sticky) equal(o *Sticky) bool {
	if s.Run != o.Run || len(s.Grid) != len(o.Grid) || !s.Cookie.equal(&o.Cookie) {
		return false
	}
	for i := range s.Grid {
		if s.Grid[i] != o.Grid[i] {
			return false
		}
	}
	return true
}

func (a *SessionAffinity) equal(b *SessionAffinity) bool {
	x, y := a.withDefaults(), b.withDefaults()
	return x.CookieName == y.CookieName && x.MaxAge.Duration == y.MaxAge.Duration && x.Path == y.Path &&
		x.Domain == y.Domain && x.Secure == y.Secure && x.SameSite == y.SameSite
}

// CanaryLoad is the load on the canary with canary weight w and these
// extras, in percent of the route's requests: the header route's counted
// share h (HeaderRoute), the weight's share of the rest, and the mirrored
// copies of what the weight sends to the stable side (MirrorPercent p of
// it), rounded up, at most 100:
//
//	load = ceil(h + (100-h)·w/100 + (100-h)·(100-w)·p/10000)
//
// Mirrored requests count in full although their answers are discarded:
// the canary serves them. Sticky sessions change nothing: the share of
// sessions, and so of requests, on the canary is the weight. The load never
// falls as w grows, so CanaryWeightFor finds the largest weight that fits.
func (x TrafficExtras) CanaryLoad(w int32) int32 {
	return canaryLoad(x.headerShare(), x.MirrorPercent, min(max(w, 0), 100))
}

// canaryLoad counts in millionths of the route's requests, rounded up once
// at the end: rounding each term apart would let the sum fall as w grows.
func canaryLoad(h, p, w int32) int32 {
	p = min(max(p, 0), 100)
	e := 10000*h + (100-h)*(100*w+(100-w)*p)
	return min(100, ceilDiv(e, 10000))
}

// CanaryWeightFor is the largest canary weight whose CanaryLoad is at most
// ready, or -1 when even weight 0 does not fit.
func (x TrafficExtras) CanaryWeightFor(ready int32) int32 {
	f := facts{hdr: x.headerShare(), mirror: min(max(x.MirrorPercent, 0), 100)}
	return min(f.weightFor(ready), 100)
}

func ceilDiv(a, b int32) int32 { return (a + b - 1) / b }

// stickyGrid returns the ticket values for weights ws: the distinct values
// in (0, 100) and 100, ascending, with a value every gap between two that
// are further apart (gap 0: none added; the managed mode adds one every
// MaxSurgePercent, as far as capacity lets a weight hop reach). ok is false
// when they are more than 16.
func stickyGrid(ws []int32, gap int32) (grid []int32, ok bool) {
	var seen [101]bool
	seen[100] = true
	for _, w := range ws {
		if w > 0 && w < 100 {
			seen[w] = true
		}
	}
	prev := int32(0)
	for w := int32(1); w <= 100; w++ {
		if !seen[w] {
			continue
		}
		for gap > 0 && w-prev > gap {
			prev += gap
			grid = append(grid, prev)
		}
		grid = append(grid, w)
		prev = w
	}
	return grid, len(grid) <= maxStickyGrid
}

// maxStickyGrid is the most tickets a router can hand out (one backend
// reference each; the Gateway API allows 16 per rule).
const maxStickyGrid = 16

// gridMask is the set of a grid's values, as bits 0..100 (no pointer, so
// it travels in facts).
type gridMask [2]uint64

func maskOf(grid []int32) gridMask {
	var m gridMask
	for _, g := range grid {
		if g >= 0 && g <= 100 {
			m[g/64] |= 1 << (g % 64)
		}
	}
	return m
}

func (m gridMask) has(w int32) bool { return m[w/64]&(1<<(w%64)) != 0 }

// snap returns the grid value nearest w in the direction of travel: up (w
// rounded down to a value, 0 below the first), or down (w rounded up, 100
// above the last). Without a grid it returns w.
func (m gridMask) snap(w int32, up bool) int32 {
	if m == (gridMask{}) || w <= 0 || w >= 100 {
		return w
	}
	if up {
		for v := w; v > 0; v-- {
			if m.has(v) {
				return v
			}
		}
		return 0
	}
	for v := w; v < 100; v++ {
		if m.has(v) {
			return v
		}
	}
	return 100
}

// runID names the tickets of one rollout: a hash of the canary revision and
// the instant the rollout started.
func runID(revision string, started metav1.MicroTime) string {
	const prime = 1099511628211
	h := uint64(14695981039346656037)
	for i := 0; i < len(revision); i++ {
		h ^= uint64(revision[i])
		h *= prime
	}
	v := uint64(started.UnixMicro())
	for i := 0; i < 8; i++ {
		h ^= v & 0xff
		h *= prime
		v >>= 8
	}
	s := strconv.FormatUint(h&0xffffffff, 16)
	for len(s) < 8 {
		s = "0" + s
	}
	return s
}

// validate checks a header route at path p.
func (h *HeaderRoute) validate(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	seen := map[string]bool{}
	for i, m := range h.Matches {
		mp := p.Child("matches").Index(i)
		switch m.Type {
		case "", HeaderExact, HeaderRegularExpression, HeaderCookie:
		default:
			errs = append(errs, field.NotSupported(mp.Child("type"), string(m.Type),
				[]string{string(HeaderExact), string(HeaderRegularExpression), string(HeaderCookie)}))
		}
		switch {
		case m.Name == "":
			errs = append(errs, field.Required(mp.Child("name"), "a match needs a name"))
		case !isToken(m.Name):
			errs = append(errs, field.Invalid(mp.Child("name"), m.Name, "must be a header or cookie name (letters, digits and !#$%&'*+-.^_`|~)"))
		case m.Type != HeaderCookie && seen[lowerASCII(m.Name)]:
			errs = append(errs, field.Duplicate(mp.Child("name"), m.Name))
		}
		if m.Type != HeaderCookie {
			seen[lowerASCII(m.Name)] = true
		} else if seen[lowerASCII("Cookie")] {
			errs = append(errs, field.Invalid(mp.Child("name"), m.Name, "a cookie match and a match on the Cookie header cannot be combined"))
		}
		switch {
		case m.Value == "":
			errs = append(errs, field.Required(mp.Child("value"), "a match needs a value"))
		case len(m.Value) > 4096:
			errs = append(errs, field.TooLong(mp.Child("value"), "", 4096))
		case m.Type == HeaderRegularExpression:
			if _, err := regexp.Compile(m.Value); err != nil {
				errs = append(errs, field.Invalid(mp.Child("value"), m.Value, "not an RE2 regular expression: "+err.Error()))
			}
		case m.Type == HeaderCookie && !isCookieValue(m.Value):
			errs = append(errs, field.Invalid(mp.Child("value"), m.Value, "not a cookie value (no spaces, quotes, commas, semicolons or backslashes)"))
		case m.Type != HeaderRegularExpression && !printable(m.Value):
			errs = append(errs, field.Invalid(mp.Child("value"), m.Value, "must be printable ASCII"))
		}
	}
	if len(h.Matches) > 8 {
		errs = append(errs, field.TooMany(p.Child("matches"), len(h.Matches), 8))
	}
	if h.ExpectedPercent != nil {
		if e := validPercent(p.Child("expectedPercent"), *h.ExpectedPercent, 0); e != nil {
			errs = append(errs, e)
		}
	}
	return errs
}

func (a *SessionAffinity) validate(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if a.CookieName != "" && !isToken(a.CookieName) {
		errs = append(errs, field.Invalid(p.Child("cookieName"), a.CookieName, "must be a cookie name (letters, digits and !#$%&'*+-.^_`|~)"))
	}
	if len(a.CookieName) > 64 {
		errs = append(errs, field.TooLong(p.Child("cookieName"), "", 64))
	}
	if a.MaxAge != nil && a.MaxAge.Duration < time.Second {
		errs = append(errs, field.Invalid(p.Child("maxAge"), a.MaxAge.Duration.String(), "must be at least 1s"))
	}
	if a.Path != "" && (a.Path[0] != '/' || !isCookieValue(a.Path)) {
		errs = append(errs, field.Invalid(p.Child("path"), a.Path, "must start with / and hold no spaces, quotes, commas, semicolons or backslashes"))
	}
	if a.Domain != "" && !isCookieValue(a.Domain) {
		errs = append(errs, field.Invalid(p.Child("domain"), a.Domain, "not a cookie domain"))
	}
	switch a.SameSite {
	case "", "Lax", "Strict":
	case "None":
		if !a.Secure {
			errs = append(errs, field.Invalid(p.Child("sameSite"), a.SameSite, "None needs secure: browsers drop such a cookie otherwise"))
		}
	default:
		errs = append(errs, field.NotSupported(p.Child("sameSite"), a.SameSite, []string{"Lax", "Strict", "None"}))
	}
	return errs
}

func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '!' || c == '#' || c == '$' || c == '%' || c == '&' || c == '\'' || c == '*' || c == '+' ||
			c == '-' || c == '.' || c == '^' || c == '_' || c == '`' || c == '|' || c == '~':
		default:
			return false
		}
	}
	return true
}

func isCookieValue(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || c == '"' || c == ',' || c == ';' || c == '\\' {
			return false
		}
	}
	return true
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < ' ' || s[i] >= 0x7f {
			return false
		}
	}
	return true
}

func lowerASCII(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}
