package network

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/server/fetchwire"
	"github.com/tandem-kafka/tandem/server/plugin"
	"github.com/tandem-kafka/tandem/server/quota"
	"github.com/tandem-kafka/tandem/server/security"
	"github.com/tandem-kafka/tandem/server/wire"
)

// The SASL state machine of a connection, as Apache Kafka's
// SaslServerAuthenticator runs it: on a SASL listener only ApiVersions,
// SaslHandshake (v1) and SaslAuthenticate are served until the client has
// authenticated; anything else closes the connection. A failed
// authentication is answered with SASL_AUTHENTICATION_FAILED and the
// connection closed. After SaslHandshake v0 the client sends bare SASL
// tokens in size-prefixed frames instead of SaslAuthenticate requests.
//
// Re-authentication (KIP-368): with connections.max.reauth.ms set (or a
// token that expires), SaslAuthenticate v1+ returns the session lifetime;
// the client re-runs SaslHandshake + SaslAuthenticate with the same
// mechanism and principal before it ends, and a request arriving after it
// ended closes the connection.

type saslState struct {
	mechName string
	mech     security.Mech // non-nil between SaslHandshake and the end of the exchange
	expiry   time.Time     // end of the session; zero: unlimited
}

const (
	apiKeySaslHandshake    = 17
	apiKeySaslAuthenticate = 36
	tlsHandshakeTimeout    = 10 * time.Second
)

// gate answers the SASL requests itself and refuses what a connection may
// not send in its state; (nil, nil) lets the request through to dispatch.
func (c *conn) gate(ctx context.Context, r *request) (kmsg.Response, error) {
	switch req := r.req.(type) {
	case *kmsg.SASLHandshakeRequest:
		return c.saslHandshake(req), nil
	case *kmsg.SASLAuthenticateRequest:
		return c.saslAuthenticate(ctx, req), nil
	}
	if r.badVersion || r.req.Key() == apiKeyApiVersions {
		return nil, nil
	}
	switch {
	case !c.authenticated.Load():
		return nil, fmt.Errorf("%s request before SASL authentication on listener %s", wire.APIName(r.req.Key()), c.l.Name)
	case c.sasl.mech != nil:
		return nil, fmt.Errorf("%s request during SASL re-authentication", wire.APIName(r.req.Key()))
	case !c.sasl.expiry.IsZero() && c.s.now().After(c.sasl.expiry):
		return nil, fmt.Errorf("SASL session of %s expired without re-authentication (connections.max.reauth.ms)", c.principal)
	}
	return nil, nil
}

func (c *conn) saslHandshake(req *kmsg.SASLHandshakeRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.SASLHandshakeResponse)
	if !c.l.IsSASL() {
		resp.ErrorCode = kerr.IllegalSaslState.Code
		return resp
	}
	resp.SupportedMechanisms = c.l.SASL.Mechanisms
	switch {
	case c.sasl.mech != nil:
		resp.ErrorCode = kerr.IllegalSaslState.Code
		c.closeAfter = true
	case !slices.Contains(c.l.SASL.Mechanisms, req.Mechanism),
		c.authenticated.Load() && req.Mechanism != c.sasl.mechName: // re-authentication keeps the mechanism
		resp.ErrorCode = kerr.UnsupportedSaslMechanism.Code
		c.closeAfter = true
	default:
		c.sasl.mechName = req.Mechanism
		c.sasl.mech = c.l.SASL.Start(req.Mechanism, c.s.cfg.Image())
		c.rawSASL.Store(req.Version == 0)
	}
	return resp
}

// readRawToken reads one bare SASL token (after SaslHandshake v0), under
// the pre-authentication frame cap.
func (c *conn) readRawToken(br *bufio.Reader, remote string) (*request, error) {
	token, reserved, err := c.readFrame(br, 0)
	if err != nil {
		return nil, fmt.Errorf("SASL token: %w", err)
	}
	req := kmsg.NewPtrSASLAuthenticateRequest()
	req.SASLAuthBytes = token
	return &request{rc: plugin.RequestContext{ClientAddr: remote}, req: req, size: len(token) + 4, start: time.Now(), raw: true, reserved: reserved}, nil
}

// handleRawToken answers a bare SASL token with a bare token; a failure
// closes the connection without an answer, as Kafka does for v0.
func (c *conn) handleRawToken(ctx context.Context, r *request) (failed bool) {
	resp := c.saslAuthenticate(ctx, r.req.(*kmsg.SASLAuthenticateRequest)).(*kmsg.SASLAuthenticateResponse)
	if resp.ErrorCode != 0 {
		c.nc.Close()
		return true
	}
	if c.authenticated.Load() {
		c.rawSASL.Store(false)
	}
	out := binary.BigEndian.AppendUint32(nil, uint32(len(resp.SASLAuthBytes)))
	if _, err := c.nc.Write(append(out, resp.SASLAuthBytes...)); err != nil {
		c.nc.Close()
		return true
	}
	return false
}

// saslAuthenticate runs one step of the exchange. A step that checks a
// credential first waits for its slot in the broker's throttle (see
// security.Throttle); a failed authentication is answered after
// connection.failed.authentication.delay.ms, as Kafka does, and the
// connection closed.
func (c *conn) saslAuthenticate(ctx context.Context, req *kmsg.SASLAuthenticateRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.SASLAuthenticateResponse)
	// fail answers msg to the client and logs the failure once, with
	// its reason alone: the line names the mechanism in its own field.
	fail := func(code *kerr.Error, msg, reason string) kmsg.Response {
		resp.ErrorCode, resp.ErrorMessage = code.Code, &msg
		c.closeAfter = true
		c.s.log.Info("SASL authentication failed", "client", c.nc.RemoteAddr(), "listener", c.l.Name, "mechanism", c.sasl.mechName, "reason", reason)
		if code == kerr.SaslAuthenticationFailed {
			c.s.m.AuthFailures.Inc()
			sleep(ctx, c.s.cfg.FailedAuthDelay)
		}
		return resp
	}
	if !c.l.IsSASL() || c.sasl.mech == nil {
		return fail(kerr.IllegalSaslState, "SaslAuthenticate without a preceding SaslHandshake", "no SaslHandshake first")
	}
	user, checks := c.sasl.mech.Claimed(req.SASLAuthBytes)
	addr := c.remoteHost()
	if checks {
		wait, err := c.s.cfg.Throttle.Admit(addr, user)
		if err != nil {
			c.s.m.AuthThrottled.Inc()
			return fail(kerr.SaslAuthenticationFailed, fmt.Sprintf("Authentication failed with SASL mechanism %s: %v", c.sasl.mechName, err), err.Error())
		}
		c.s.m.AuthThrottleWait.Add(wait.Seconds())
		if err := sleep(ctx, wait); err != nil {
			return fail(kerr.IllegalSaslState, "connection closing", "connection closing")
		}
	}
	out, done, err := c.sasl.mech.Step(req.SASLAuthBytes)
	if err != nil {
		if checks {
			c.s.cfg.Throttle.Failed(addr, user)
		}
		// Kafka's words; other reasons than a wrong credential follow them.
		msg := "Authentication failed during authentication due to invalid credentials with SASL mechanism " + c.sasl.mechName
		if !errors.Is(err, security.ErrAuth) {
			msg += ": " + err.Error()
		}
		return fail(kerr.SaslAuthenticationFailed, msg, err.Error())
	}
	resp.SASLAuthBytes = out
	if !done {
		return resp
	}
	c.s.cfg.Throttle.Succeeded(addr, user)
	p, expiry := c.sasl.mech.Principal(), c.sasl.mech.Expiry()
	c.sasl.mech = nil
	if c.authenticated.Load() && p != c.principal {
		msg := fmt.Sprintf("re-authentication as %s on a connection of %s", p, c.principal)
		return fail(kerr.SaslAuthenticationFailed, msg, msg)
	}
	c.principal = p
	now := c.s.now()
	life := c.s.cfg.Reauth
	if !expiry.IsZero() && (life == 0 || expiry.Sub(now) < life) {
		life = max(expiry.Sub(now), time.Millisecond)
	}
	c.sasl.expiry = time.Time{}
	if life > 0 {
		c.sasl.expiry = now.Add(life)
		resp.SessionLifetimeMillis = life.Milliseconds()
	}
	c.authenticated.Store(true)
	return resp
}

// remoteHost is the client's address without its port.
func (c *conn) remoteHost() string {
	addr := c.nc.RemoteAddr().String()
	if host, _, err := net.SplitHostPort(addr); err == nil {
		return host
	}
	return addr
}

// throttle records the request against the client's quotas and, when it
// exceeds one, sets the response's throttle time and mutes the connection
// for that long (or, for old versions that expect it, delays the
// response).
func (c *conn) throttle(ctx context.Context, r *request, resp kmsg.Response, elapsed time.Duration) {
	img := c.s.cfg.Image()
	tr, ok := resp.(kmsg.ThrottleResponse)
	if len(img.ClientQuotas) == 0 || !ok {
		return
	}
	switch r.req.Key() {
	case apiKeyApiVersions, apiKeySaslHandshake, apiKeySaslAuthenticate:
		return // exempt, as in Kafka
	}
	user, cid, now := quota.User(c.principal), r.rc.ClientID, time.Now()
	q := c.s.cfg.Quotas
	var d time.Duration
	switch resp := resp.(type) {
	case *kmsg.ProduceResponse:
		d = q.Record(img, quota.Produce, user, cid, float64(r.size), now)
	case *fetchwire.Response:
		n := 0
		for _, t := range resp.Records {
			for _, recs := range t {
				n += recs.Len()
			}
		}
		d = q.Record(img, quota.Fetch, user, cid, float64(n), now)
	}
	// request_percentage: handler time as a percentage of one thread.
	d = max(d, q.Record(img, quota.Request, user, cid, float64(elapsed.Nanoseconds())*100/1e9, now))
	if d <= 0 {
		return
	}
	if st, ok := resp.(kmsg.SetThrottleResponse); ok {
		st.SetThrottle(int32(d.Milliseconds()))
	}
	if _, after := tr.Throttle(); after {
		c.muteUntil.Store(now.Add(d).UnixNano())
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// sleep waits d unless ctx ends first.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
