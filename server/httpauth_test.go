package server

import (
	"context"
	"testing"
)

// The HTTP endpoint is bound before the broker starts (tandem serve), so
// a console login can arrive before the metadata quorum is open: a user
// who is no PLAIN user is refused then, as one with a wrong password.
func TestAuthenticateBeforeStart(t *testing.T) {
	b, err := New(Config{DataDir: t.TempDir(), Props: map[string]string{
		"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": "PLAIN", "tandem.sasl.plain.users": "admin:pw"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := b.Authenticate(ctx, "127.0.0.1:1", "admin", "wrong"); err == nil {
		t.Fatal("admin with a wrong password authenticated")
	}
	if _, err := b.Authenticate(ctx, "127.0.0.1:1", "nobody", "pw"); err == nil {
		t.Fatal("a user who is no PLAIN user authenticated before the start")
	}
	if p, err := b.Authenticate(ctx, "127.0.0.1:1", "admin", "pw"); err != nil || p != "User:admin" {
		t.Fatalf("admin before the start: %q, %v", p, err)
	}
}
