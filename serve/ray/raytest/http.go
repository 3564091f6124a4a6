package raytest

import (
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// The Serve REST endpoint the emulator answers, and the largest PUT body it
// reads.
const (
	rayServePath = "/api/serve/applications/"
	rayMaxBody   = 8 << 20
)

// ServeHTTP answers the Serve REST API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != rayServePath && r.URL.Path != strings.TrimSuffix(rayServePath, "/") {
		http.NotFound(w, r)
		return
	}
	s.mu.Lock()
	hang, release := s.hang, s.release
	s.mu.Unlock()
	if hang {
		select {
		case <-r.Context().Done():
			s.record(r.Method, "hung", r.Context().Err())
			return
		case <-release:
		}
	}
	var share int32
	if r.Method == http.MethodPut {
		share = s.servingShare()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.token != "" {
		switch credential := s.credential(r); {
		case credential == "":
			s.answer(w, r.Method, "", http.StatusUnauthorized, "Unauthorized: Missing authentication token")
			return
		case subtle.ConstantTimeCompare([]byte(credential), []byte("Bearer "+s.token)) != 1:
			s.answer(w, r.Method, "", http.StatusForbidden, "Forbidden: Invalid authentication token")
			return
		}
	}
	if s.failCount != 0 {
		if s.failCount > 0 {
			s.failCount--
		}
		s.answer(w, r.Method, "", s.failCode, "emulated failure")
		return
	}
	switch r.Method {
	case http.MethodGet:
		s.get(w, r)
	case http.MethodPut:
		s.put(w, r, share)
	case http.MethodDelete:
		s.shutdown()
		s.hist.add(s.opts.Clock, "DELETE", "", nil)
		w.WriteHeader(http.StatusOK)
	default:
		w.Header().Set("Allow", "GET, PUT, DELETE")
		s.answer(w, r.Method, "", http.StatusMethodNotAllowed, "method not allowed")
	}
}

// credential is the first credential r carries, in the order
// RequireToken describes; "" if none.
func (s *Server) credential(r *http.Request) string {
	for _, h := range s.tokenHeaders {
		if v := r.Header.Get(h); v != "" {
			return v
		}
	}
	if c, err := r.Cookie("ray-authentication-token"); err == nil && c.Value != "" {
		return "Bearer " + c.Value
	}
	return ""
}

// answer writes a failure as text and records it.
func (s *Server) answer(w http.ResponseWriter, method, arg string, code int, text string) {
	s.hist.add(s.opts.Clock, method, arg, fmt.Errorf("status %d: %s", code, text))
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(code)
	io.WriteString(w, text)
}

func (s *Server) record(op, arg string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hist.add(s.opts.Clock, op, arg, err)
}

func (s *Server) get(w http.ResponseWriter, r *http.Request) {
	apiType := r.URL.Query().Get("api_type")
	arg := ""
	if apiType != "" {
		arg = "api_type=" + apiType
		if t := strings.ToLower(apiType); t != "declarative" && t != "imperative" {
			s.answer(w, http.MethodGet, arg, http.StatusBadRequest,
				fmt.Sprintf("api_type %q: want declarative or imperative", apiType))
			return
		}
	}
	s.tick()
	s.hist.add(s.opts.Clock, "GET", arg, nil)
	w.Header().Set("Content-Type", "application/json")
	if s.garbage {
		io.WriteString(w, `{"applications": {"app": {"deployments": [`)
		return
	}
	b, err := json.Marshal(s.details(strings.EqualFold(apiType, "imperative")))
	if err != nil { // only plain values are marshalled
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Write(b)
}

// put applies a config; share is the cluster's share of traffic, for
// GuardRedeploys.
func (s *Server) put(w http.ResponseWriter, r *http.Request, share int32) {
	body, err := io.ReadAll(io.LimitReader(r.Body, rayMaxBody+1))
	if err != nil {
		s.answer(w, http.MethodPut, "", http.StatusBadRequest, "reading the body: "+err.Error())
		return
	}
	if len(body) > rayMaxBody {
		s.answer(w, http.MethodPut, "", http.StatusRequestEntityTooLarge, "body too large")
		return
	}
	cfg, problems := parseRayConfig(body)
	if len(problems) > 0 {
		text := fmt.Sprintf("%d validation error(s) for ServeDeploySchema\n%s", len(problems), strings.Join(problems, "\n"))
		s.answer(w, http.MethodPut, "invalid", http.StatusBadRequest, text)
		return
	}
	if v := s.redeployViolation(cfg, share); v != "" {
		s.violations = append(s.violations, v)
		s.answer(w, http.MethodPut, "redeploy", http.StatusBadRequest, "raytest: refusing to redeploy a serving cluster: "+v)
		return
	}
	s.lastPut = append([]byte(nil), body...)
	s.apply(cfg)
	arg := "target_capacity=" + formatTC(cfg.tc)
	s.hist.add(s.opts.Clock, "PUT", arg, nil)
	w.WriteHeader(http.StatusOK)
}
