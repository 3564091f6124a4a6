package gateway

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"pgregory.net/rapid"

	"github.com/upshift-dev/upshift/strategy"
)

// TestTicketPins: for any Cookie header, at most one of the two sticky
// rules matches; the canary one exactly when the header carries this
// run's ticket at most θ, the stable one exactly when it carries one above
// θ; tickets of other runs, cookies whose name merely ends in ours, and
// tickets that merely start with a canary ticket match neither.
func TestTicketPins(t *testing.T) {
	grid := []int32{1, 5, 10, 20, 50, 100}
	rapid.Check(t, func(t *rapid.T) {
		st := &strategy.Sticky{Run: rapid.StringMatching(`[a-f0-9]{8}`).Draw(t, "run"), Grid: grid,
			Cookie: strategy.SessionAffinity{CookieName: rapid.SampledFrom([]string{"", "sess", "a.b"}).Draw(t, "cookie")}}
		theta := rapid.SampledFrom(append([]int32{0}, grid...)).Draw(t, "theta")
		var low, high []int32
		for _, g := range grid {
			if g <= theta {
				low = append(low, g)
			} else {
				high = append(high, g)
			}
		}
		name := cookieName(st)
		others := rapid.SliceOfN(rapid.StringMatching(`[a-z]{1,6}=[a-z0-9.]{0,6}`), 0, 4).Draw(t, "others")
		kind := rapid.IntRange(0, 4).Draw(t, "kind")
		ticket := rapid.SampledFrom(grid).Draw(t, "ticket")
		var ours string
		switch kind {
		case 0: // this run's ticket
			ours = fmt.Sprintf("%s=%s.%d", name, st.Run, ticket)
		case 1: // another run's
			ours = fmt.Sprintf("%s=%s.%d", name, "zz"+st.Run, ticket)
		case 2: // a cookie whose name ends in ours
			ours = fmt.Sprintf("x%s=%s.%d", name, st.Run, ticket)
		case 3: // a value that starts with a ticket
			ours = fmt.Sprintf("%s=%s.%d0", name, st.Run, ticket)
		}
		cookies := append([]string{}, others...)
		at := rapid.IntRange(0, len(cookies)).Draw(t, "at")
		if ours != "" {
			cookies = append(cookies[:at], append([]string{ours}, cookies[at:]...)...)
		}
		header := strings.Join(cookies, rapid.SampledFrom([]string{"; ", ";"}).Draw(t, "sep"))
		match := func(tickets []int32) bool {
			if len(tickets) == 0 {
				return false
			}
			return regexp.MustCompile(ticketCond(st, tickets).value).MatchString(header)
		}
		toCanary, toStable := match(low), match(high)
		wantCanary := kind == 0 && ticket <= theta
		wantStable := kind == 0 && ticket > theta
		if v := ticket * 10; kind == 3 && slices.Contains(grid, v) { // "5" + "0" is ticket 50, a real one
			wantCanary, wantStable = v <= theta, v > theta
		}
		if toCanary != wantCanary || toStable != wantStable {
			t.Fatalf("header %q θ=%d: canary %v stable %v, want %v %v", header, theta, toCanary, toStable, wantCanary, wantStable)
		}
	})
}

func TestSetCookie(t *testing.T) {
	st := &strategy.Sticky{Run: "r1", Grid: []int32{100}}
	if got, want := setCookie(st, 100), "upshift-session=r1.100; Max-Age=86400; Path=/; HttpOnly; SameSite=Lax"; got != want {
		t.Errorf("defaults: %q, want %q", got, want)
	}
	st.Cookie = strategy.SessionAffinity{CookieName: "s", MaxAge: &metav1.Duration{Duration: time.Hour}, Path: "/shop",
		Domain: "shop.example", Secure: true, SameSite: "None"}
	if got, want := setCookie(st, 20), "s=r1.20; Max-Age=3600; Path=/shop; Domain=shop.example; Secure; HttpOnly; SameSite=None"; got != want {
		t.Errorf("all set: %q, want %q", got, want)
	}
	if got, want := cookieRE("a.b", "x+y"), `(^|;\s*)a\.b=x\+y(;|$)`; got != want {
		t.Errorf("cookieRE: %q, want %q", got, want)
	}
}
