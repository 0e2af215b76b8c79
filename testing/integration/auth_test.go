package integration

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorproto"
	"github.com/tandem-kafka/tandem/testing/tandemtest"
)

// metric returns the value of a metric of the broker's /metrics text.
func metric(t *testing.T, sb *secureBroker, name string) float64 {
	t.Helper()
	var out strings.Builder
	sb.WritePrometheus(&out)
	for _, line := range strings.Split(out.String(), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			var f float64
			fmt.Sscan(v, &f)
			return f
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// plainAuth authenticates one new connection with PLAIN and returns the
// broker's answer (nil and the error when it closed the connection).
func plainAuth(t *testing.T, addr, user, password string) (*kmsg.SASLAuthenticateResponse, error) {
	c := dialRaw(t, addr)
	c.handshake("PLAIN")
	return c.authenticate([]byte("\x00" + user + "\x00" + password))
}

// TestSASLThrottle: failed authentications are counted and answered late;
// repeated failures from one address space out the next attempts (the
// broker reports the time they waited) and, guessed in parallel, most are
// refused without their password being checked; a user that authenticated
// from that address before is not held up, and a right password after
// wrong ones gets through.
func TestSASLThrottle(t *testing.T) {
	tandemtest.Long(t) // waits out authentication delays, seconds: the full tier only
	sb := startSecure(t, false, map[string]string{"connection.failed.authentication.delay.ms": "20"})
	addr := sb.ListenerAddr("SASL_PLAINTEXT")
	if resp, err := plainAuth(t, addr, "bob", "bob-secret"); err != nil || resp.ErrorCode != 0 {
		t.Fatalf("bob: %v %+v", err, resp)
	}
	for i := range 8 {
		resp, err := plainAuth(t, addr, "alice", fmt.Sprintf("guess-%d", i))
		if err != nil || resp.ErrorCode != kerr.SaslAuthenticationFailed.Code {
			t.Fatalf("guess %d: %v %+v", i, err, resp)
		}
	}
	if n := metric(t, sb, "tandem_server_failed_authentication_total"); n != 8 {
		t.Fatalf("%v failed authentications counted, want 8", n)
	}
	if w := metric(t, sb, "tandem_server_authentication_throttle_seconds_total"); w <= 0 {
		t.Fatalf("8 failures in a row made no attempt wait (%v s)", w)
	}
	if resp, err := plainAuth(t, addr, "alice", "alice-secret"); err != nil || resp.ErrorCode != 0 {
		t.Fatalf("the right password after wrong ones: %v %+v", err, resp)
	}

	// 30 guesses at once for eve from the same address.
	var wg sync.WaitGroup
	for i := range 30 {
		wg.Go(func() {
			c, err := tandemtest.DialErr(addr)
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			hs := kmsg.NewPtrSASLHandshakeRequest()
			hs.Version, hs.Mechanism = 1, "PLAIN"
			if _, err := c.Request(hs); err != nil {
				t.Errorf("handshake %d: %v", i, err)
				return
			}
			auth := kmsg.NewPtrSASLAuthenticateRequest()
			auth.Version, auth.SASLAuthBytes = 2, fmt.Appendf(nil, "\x00eve\x00parallel-%d", i)
			if resp, err := c.Request(auth); err == nil && resp.(*kmsg.SASLAuthenticateResponse).ErrorCode == 0 {
				t.Errorf("guess %d succeeded", i)
			}
		})
	}
	wg.Wait()
	refused := metric(t, sb, "tandem_server_authentication_throttled_total")
	if refused == 0 || refused >= 30 {
		t.Fatalf("%v of 30 parallel guesses refused unchecked", refused)
	}
	t.Logf("30 parallel guesses: %v refused unchecked, %v checked", refused, 30-refused)
	// bob authenticated from this address before the guessing started.
	if resp, err := plainAuth(t, addr, "bob", "bob-secret"); err != nil || resp.ErrorCode != 0 {
		t.Fatalf("bob after the guessing: %v %+v", err, resp)
	}
}

// TestSCRAMUnknownUser: SCRAM does not tell whether a user exists: an
// unknown user gets a salt and an iteration count like a known user's,
// the same ones on every attempt, and fails at the final message with the
// answer a known user with a wrong password gets.
func TestSCRAMUnknownUser(t *testing.T) {
	sb := startSecure(t, false, nil)
	addScramUsers(t, sb.ListenerAddr("PLAINTEXT"), nil, "alice")
	addr := sb.ListenerAddr("SASL_PLAINTEXT")
	for _, mech := range []string{"SCRAM-SHA-256", "SCRAM-SHA-512"} {
		attempt := func(user string) (salt, iterations, failure string) {
			c := dialRaw(t, addr)
			sc := &scramClient{mech: mech}
			c.handshake(mech)
			sc.Begin(user, "wrong", "")
			first, _ := sc.Step("")
			resp, err := c.authenticate([]byte(first))
			if err != nil || resp.ErrorCode != 0 {
				t.Fatalf("%s %s: client-first refused: %v %+v", mech, user, err, resp)
			}
			for _, kv := range strings.Split(string(resp.SASLAuthBytes), ",") {
				k, v, _ := strings.Cut(kv, "=")
				switch k {
				case "s":
					salt = v
				case "i":
					iterations = v
				}
			}
			final, err := sc.Step(string(resp.SASLAuthBytes))
			if err != nil {
				t.Fatal(err)
			}
			resp, err = c.authenticate([]byte(final))
			if err != nil || resp.ErrorCode != kerr.SaslAuthenticationFailed.Code {
				t.Fatalf("%s %s: final message: %v %+v", mech, user, err, resp)
			}
			c.closed(mech + " " + user)
			return salt, iterations, strings.ReplaceAll(deref(resp.ErrorMessage), user, "USER")
		}
		knownSalt, knownIter, knownFail := attempt("alice")
		salt1, iter1, fail1 := attempt("nobody")
		salt2, iter2, _ := attempt("nobody")
		otherSalt, _, _ := attempt("somebody")
		if salt1 != salt2 || iter1 != iter2 {
			t.Fatalf("%s: an unknown user's salt or iterations change between attempts: %s/%s, %s/%s", mech, salt1, iter1, salt2, iter2)
		}
		if salt1 == otherSalt || salt1 == knownSalt {
			t.Fatalf("%s: unknown users share a salt", mech)
		}
		if iter1 != knownIter || len(salt1) != len(knownSalt) {
			t.Fatalf("%s: unknown user: %s iterations, salt %q; known user: %s iterations, salt %q", mech, iter1, salt1, knownIter, knownSalt)
		}
		if fail1 != knownFail {
			t.Fatalf("%s: an unknown user fails with %q, a wrong password with %q", mech, fail1, knownFail)
		}
	}
}

// TestFindMirrorCoordinatorACL: FindCoordinator for a mirror's key is
// authorized like the mirror APIs: DESCRIBE on the MIRROR (or on the
// cluster), else MIRROR_AUTHORIZATION_FAILED.
func TestFindMirrorCoordinatorACL(t *testing.T) {
	sb := startSecure(t, true, nil)
	addr := sb.ListenerAddr("SASL_PLAINTEXT")
	admin := saslRaw(t, addr, "admin")
	served := servedAPIs(t, admin)
	find := func(c *rawConn, keys ...string) []int16 {
		req := kmsg.NewPtrFindCoordinatorRequest()
		req.CoordinatorType, req.CoordinatorKeys = 2, keys
		resp, err := c.roundTrip(versioned(req, served))
		if err != nil {
			t.Fatal(err)
		}
		var codes []int16
		for _, co := range resp.(*kmsg.FindCoordinatorResponse).Coordinators {
			codes = append(codes, co.ErrorCode)
		}
		return codes
	}
	bob := saslRaw(t, addr, "bob")
	denied := mirrorproto.ErrMirrorAuthorizationFailed.Code
	if codes := find(bob, "m1", "m1:AAAAAAAAAAAAAAAAAAAAAA:0"); codes[0] != denied || codes[1] != denied {
		t.Fatalf("without ACLs: %v, want MIRROR_AUTHORIZATION_FAILED", codes)
	}
	aclRequest(t, admin, served, "User:bob", kmsg.ACLPermissionTypeAllow, kmsg.ACLResourcePatternTypeLiteral,
		[]grant{mirrorG("m1", kmsg.ACLOperationDescribe)})
	if codes := find(bob, "m1", "m1:AAAAAAAAAAAAAAAAAAAAAA:0", "m2"); codes[0] != 0 || codes[1] != 0 || codes[2] != denied {
		t.Fatalf("with DESCRIBE on mirror m1: %v, want m1's keys found and m2 refused", codes)
	}
	if codes := find(admin, "m2"); codes[0] != 0 {
		t.Fatalf("a super user: %v", codes)
	}
}
