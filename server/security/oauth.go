package security

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"slices"
	"strings"
	"time"
)

// oauthConfig validates OAUTHBEARER tokens: signed JWTs (RS256 or ES256)
// from issuers whose public keys are configured, either as a JWKS file
// (sasl.oauthbearer.jwks.endpoint.url=file:///path, as Kafka accepts) or
// as PEM files (tandem.sasl.oauthbearer.public.keys, comma-separated).
// Unsigned tokens (alg "none") and every other algorithm are refused.
type oauthConfig struct {
	keys      map[string]crypto.PublicKey // by kid; "" for keys without one
	issuer    string                      // sasl.oauthbearer.expected.issuer
	audiences []string                    // sasl.oauthbearer.expected.audience
	subClaim  string                      // sasl.oauthbearer.sub.claim.name
	skew      time.Duration               // sasl.oauthbearer.clock.skew.seconds
}

func parseOAuth(get func(string) string) (*oauthConfig, error) {
	c := &oauthConfig{keys: map[string]crypto.PublicKey{}, issuer: get("sasl.oauthbearer.expected.issuer"), subClaim: "sub", skew: 30 * time.Second}
	if s := get("sasl.oauthbearer.sub.claim.name"); s != "" {
		c.subClaim = s
	}
	if a := get("sasl.oauthbearer.expected.audience"); a != "" {
		for _, x := range strings.Split(a, ",") {
			c.audiences = append(c.audiences, strings.TrimSpace(x))
		}
	}
	if u := get("sasl.oauthbearer.jwks.endpoint.url"); u != "" {
		path, ok := strings.CutPrefix(u, "file://")
		if !ok {
			return nil, fmt.Errorf("sasl.oauthbearer.jwks.endpoint.url %q: only file:// URLs are supported", u)
		}
		if err := c.loadJWKS(path); err != nil {
			return nil, fmt.Errorf("sasl.oauthbearer.jwks.endpoint.url: %w", err)
		}
	}
	if files := get("tandem.sasl.oauthbearer.public.keys"); files != "" {
		for i, f := range strings.Split(files, ",") {
			k, err := readPublicKey(strings.TrimSpace(f))
			if err != nil {
				return nil, fmt.Errorf("tandem.sasl.oauthbearer.public.keys: %w", err)
			}
			c.keys[fmt.Sprintf("pem-%d", i)] = k
		}
	}
	if len(c.keys) == 0 {
		return nil, nil
	}
	return c, nil
}

func readPublicKey(path string) (crypto.PublicKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	blk, _ := pem.Decode(data)
	if blk == nil {
		return nil, fmt.Errorf("%s: no PEM block", path)
	}
	if blk.Type == "CERTIFICATE" {
		cert, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return cert.PublicKey, nil
	}
	k, err := x509.ParsePKIXPublicKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return k, nil
}

func (c *oauthConfig) loadJWKS(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var set struct {
		Keys []struct {
			Kty, Kid, Crv, N, E, X, Y string
		} `json:"keys"`
	}
	if err := json.Unmarshal(data, &set); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	num := func(s string) (*big.Int, error) {
		b, err := base64.RawURLEncoding.DecodeString(s)
		return new(big.Int).SetBytes(b), err
	}
	for _, k := range set.Keys {
		switch k.Kty {
		case "RSA":
			n, err1 := num(k.N)
			e, err2 := num(k.E)
			if err := errors.Join(err1, err2); err != nil {
				return fmt.Errorf("key %q: %w", k.Kid, err)
			}
			c.keys[k.Kid] = &rsa.PublicKey{N: n, E: int(e.Int64())}
		case "EC":
			if k.Crv != "P-256" {
				continue
			}
			x, err1 := num(k.X)
			y, err2 := num(k.Y)
			if err := errors.Join(err1, err2); err != nil {
				return fmt.Errorf("key %q: %w", k.Kid, err)
			}
			c.keys[k.Kid] = &ecdsa.PublicKey{Curve: elliptic.P256(), X: x, Y: y}
		}
	}
	return nil
}

// verify checks a compact JWS and returns the principal and expiry.
func (c *oauthConfig) verify(token string, now time.Time) (string, time.Time, error) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return "", time.Time{}, errors.New("token is not a signed JWT")
	}
	var hdr struct{ Alg, Kid string }
	if err := decodeSegment(parts[0], &hdr); err != nil {
		return "", time.Time{}, fmt.Errorf("token header: %w", err)
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil || len(sig) == 0 {
		return "", time.Time{}, errors.New("token has no valid signature")
	}
	digest := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	ok := false
	for kid, key := range c.keys {
		if hdr.Kid != "" && kid != hdr.Kid && !strings.HasPrefix(kid, "pem-") {
			continue
		}
		switch k := key.(type) {
		case *rsa.PublicKey:
			ok = hdr.Alg == "RS256" && rsa.VerifyPKCS1v15(k, crypto.SHA256, digest[:], sig) == nil
		case *ecdsa.PublicKey:
			ok = hdr.Alg == "ES256" && len(sig) == 64 &&
				ecdsa.Verify(k, digest[:], new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:]))
		}
		if ok {
			break
		}
	}
	if !ok {
		return "", time.Time{}, fmt.Errorf("token signature (alg %q) does not verify with any configured issuer key", hdr.Alg)
	}
	var claims map[string]any
	if err := decodeSegment(parts[1], &claims); err != nil {
		return "", time.Time{}, fmt.Errorf("token claims: %w", err)
	}
	exp, ok := claims["exp"].(float64)
	if !ok {
		return "", time.Time{}, errors.New("token has no exp claim")
	}
	expiry := time.UnixMilli(int64(exp * 1000))
	if !now.Before(expiry.Add(c.skew)) {
		return "", time.Time{}, errors.New("token expired")
	}
	if nbf, ok := claims["nbf"].(float64); ok && now.Add(c.skew).Before(time.UnixMilli(int64(nbf*1000))) {
		return "", time.Time{}, errors.New("token not yet valid")
	}
	if c.issuer != "" && claims["iss"] != c.issuer {
		return "", time.Time{}, fmt.Errorf("token issuer %v is not %q", claims["iss"], c.issuer)
	}
	if len(c.audiences) > 0 {
		var auds []string
		switch a := claims["aud"].(type) {
		case string:
			auds = []string{a}
		case []any:
			for _, x := range a {
				if s, ok := x.(string); ok {
					auds = append(auds, s)
				}
			}
		}
		if !slices.ContainsFunc(auds, func(a string) bool { return slices.Contains(c.audiences, a) }) {
			return "", time.Time{}, fmt.Errorf("token audience %v is not one of %v", claims["aud"], c.audiences)
		}
	}
	sub, _ := claims[c.subClaim].(string)
	if sub == "" {
		return "", time.Time{}, fmt.Errorf("token has no %s claim", c.subClaim)
	}
	return "User:" + sub, expiry, nil
}

func decodeSegment(s string, v any) error {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// oauthMech is RFC 7628's client response: gs2-header, then
// \x01-separated key=value pairs with auth=Bearer <token>, ending \x01\x01.
type oauthMech struct {
	cfg  *oauthConfig
	sub  string
	exp  time.Time
	done bool
}

func (m *oauthMech) Step(in []byte) ([]byte, bool, error) {
	if m.done {
		return nil, false, errors.New("OAUTHBEARER: message after authentication")
	}
	m.done = true
	_, kvs, ok := bytes.Cut(in, []byte{1})
	if !ok {
		return nil, false, errors.New("OAUTHBEARER: malformed client response")
	}
	var token string
	for _, kv := range bytes.Split(kvs, []byte{1}) {
		if v, ok := bytes.CutPrefix(kv, []byte("auth=")); ok {
			scheme, tok, _ := strings.Cut(string(v), " ")
			if !strings.EqualFold(scheme, "Bearer") {
				return nil, false, errors.New("OAUTHBEARER: auth scheme is not Bearer")
			}
			token = strings.TrimSpace(tok)
		}
	}
	sub, exp, err := m.cfg.verify(token, time.Now())
	if err != nil {
		return nil, false, fmt.Errorf("OAUTHBEARER: %w", err)
	}
	m.sub, m.exp = sub, exp
	return []byte{}, true, nil
}

func (m *oauthMech) Principal() string { return m.sub }
func (m *oauthMech) Expiry() time.Time { return m.exp }

// Claimed: the token names its subject only once verified; the attempt is
// throttled by the client's address.
func (m *oauthMech) Claimed([]byte) (string, bool) { return "", !m.done }
