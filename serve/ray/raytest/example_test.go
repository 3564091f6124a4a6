package raytest_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/upshift-dev/upshift/serve/ray/raytest"
)

// A cluster whose replicas take two polls to start: a config at
// target_capacity 50 asks for half of num_replicas 3, which Ray rounds
// half up to 2, and each GET is one poll of the emulated controller.
func Example() {
	rs := raytest.New(raytest.Options{StartPolls: 2})
	srv := httptest.NewServer(rs)
	defer srv.Close()

	config := `{"target_capacity": 50, "applications": [{"name": "shop", "import_path": "shop:app",
	  "deployments": [{"name": "Ranker", "num_replicas": 3}]}]}`
	req, _ := http.NewRequest(http.MethodPut, srv.URL+"/api/serve/applications/", strings.NewReader(config))
	resp, err := srv.Client().Do(req)
	if err != nil {
		fmt.Println(err)
		return
	}
	resp.Body.Close()
	fmt.Println("PUT:", resp.StatusCode)

	for range 3 {
		st, _ := rs.Deployment("shop", "Ranker")
		fmt.Printf("%s target %d running %d starting %d\n", st.Status, st.Target, st.Running, st.Starting)
		resp, err := srv.Client().Get(srv.URL + "/api/serve/applications/")
		if err != nil {
			fmt.Println(err)
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	fmt.Println("polls:", rs.Polls())
	// Output:
	// PUT: 200
	// UPDATING target 2 running 0 starting 2
	// UPDATING target 2 running 0 starting 2
	// HEALTHY target 2 running 2 starting 0
	// polls: 3
}
