package fake_test

import (
	"context"
	"fmt"
	"net/http"

	"github.com/upshift-dev/upshift/fake"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/strategy"
)

// Sticky sessions, a header route and a mirror on a Router, as the data
// plane applies them to 5,000 users: every session keeps the ticket it got,
// so the share of sessions on the canary follows the weight and no session
// leaves the canary while the weight rises; the beta testers' requests all
// reach the canary; a fifth of the stable side's requests are copied to it.
func ExampleTraffic_SetUsers() {
	ctx := context.Background()
	router := fake.NewRouter(nil)
	traffic := fake.NewTraffic(router, nil, nil, 1000)
	traffic.SetSeed(42)
	if err := traffic.SetUsers(fake.Users{N: 5000}); err != nil {
		fmt.Println(err)
		return
	}
	traffic.SetHeaderShare(0.02, http.Header{"X-Beta": {"1"}}) // 2% of requests come from beta testers
	extras := strategy.TrafficExtras{
		HeaderRoute:   &strategy.HeaderRoute{Matches: []strategy.HeaderMatch{{Name: "x-beta", Value: "1"}}},
		MirrorPercent: 20,
		Sticky:        &strategy.Sticky{Run: "5eed0001", Grid: []int32{10, 25, 50, 100}},
	}
	var prev fake.TrafficStats
	for _, w := range []int32{10, 25, 50} {
		err := router.SetRoutes(ctx, rollout.Routes{Weights: rollout.Weights{A: 100 - w, B: w}, Canary: strategy.SideB, Extras: extras})
		if err != nil {
			fmt.Println(err)
			return
		}
		for range 20 {
			traffic.Tick()
		}
		st := traffic.Stats()
		fmt.Printf("weight %2d: sessions on the canary %4.1f%% of %d, flips %d; header-routed %d of %d marked; copies %d of %d stable-bound\n",
			w, st.SessionShare(), st.Sessions, st.Flips, st.HeaderRouted-prev.HeaderRouted, st.HeaderMarked-prev.HeaderMarked,
			st.B.Mirrored-prev.B.Mirrored, st.A.Requests-prev.A.Requests)
		prev = st
	}
	router.DropExtras() // a GitOps tool re-applies the route without them
	routes, _ := router.Routes(ctx)
	for range 20 {
		traffic.Tick()
	}
	fmt.Printf("dropped: extras %q; flips %d\n", routes.Extras.String(), traffic.Stats().Flips)
	// Output:
	// weight 10: sessions on the canary 10.0% of 4894, flips 0; header-routed 424 of 424 marked; copies 3524 of 17620 stable-bound
	// weight 25: sessions on the canary 25.0% of 4894, flips 0; header-routed 424 of 424 marked; copies 2937 of 14684 stable-bound
	// weight 50: sessions on the canary 50.0% of 4894, flips 0; header-routed 424 of 424 marked; copies 1958 of 9788 stable-bound
	// dropped: extras "no extras"; flips 4956
}
