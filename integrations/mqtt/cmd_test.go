package kdbmqtt_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kdb-project/kdb"
	kdbmqtt "github.com/kdb-project/kdb/integrations/mqtt"
)

// TestBadRecords damages stored records, through the API (records that do
// not decode or lack what the server needs, in every index) and on disk (a
// byte of a retained message kept in the journal): the restarted broker
// logs each at error level and skips it, and serves the rest.
func TestBadRecords(t *testing.T) {
	bin := buildBin(t, "./cmd/kdb-mqtt")
	dir := t.TempDir()
	p := startBroker(t, bin, "-store", dir)
	c := mustDial(t, p.addr, connOpts{id: "keeper", cleanStart: true, expiry: 3600})
	c.subscribe(t, 1, "k/#")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.publish(ctx, "good/1", 1, true, []byte("good")); err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("B"), 2000) // kept in the journal (over ValueThreshold)
	if err := c.publish(ctx, "big/corrupt-me", 1, true, big); err != nil {
		t.Fatal(err)
	}
	c.close()
	p.stop(t)

	db, err := kdb.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	ns, err := db.Namespace(kdbmqtt.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	b := ns.NewBatch()
	b.Put("ret", []byte("bad/json"), []byte(`{"topic_name":"bad/json","payload":`))
	b.Put("ret", []byte("bad/notopic"), []byte(`{"payload":"eA=="}`))
	b.Put("ret", []byte("bad/binary"), []byte{0x01, 5, 'b', 'a'}) // the binary encoding, truncated
	b.Put("ret", []byte("bad/format"), []byte{0x7f, 0})
	b.Put("cl", []byte("bad-client"), []byte("not json at all"))
	b.Put("sub", []byte("bad-client\x00x/#"), []byte(`{"client":"bad-client"}`))
	b.Put("if", []byte("bad-client\x00\x00\x07"), []byte(`{"client":"someone-else","packet_id":9,"fixedheader":{"type":3}}`))
	b.Put("pub", []byte("short"), []byte(`{}`))
	b.Put("sys", []byte("info"), []byte(`[1,2`))
	if err := db.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if n := damage(t, dir, bytes.Repeat([]byte("B"), 100)); n == 0 { // inside its payload
		t.Fatal("the retained message kept in the journal was not found on disk")
	}

	p = startBroker(t, bin, "-store", dir)
	logs := p.log.String()
	for _, want := range []string{"mq/ret", "mq/cl", "mq/sub", "mq/if", "mq/pub", "mq/sys"} {
		if !regexp.MustCompile(`level=ERROR msg="kdbmqtt: skipping a malformed stored record" .*index=` + regexp.QuoteMeta(want) + ` `).MatchString(logs) {
			t.Errorf("no error logged for the malformed record in %s", want)
		}
	}
	if !regexp.MustCompile(`skipping a malformed stored record" .*index=mq/ret key=big/corrupt-me error=".*corrupt`).MatchString(logs) {
		t.Errorf("no error logged for the retained message damaged on disk")
	}
	if !strings.Contains(logs, "skipped_records=10") {
		t.Errorf("the broker did not report 10 skipped records")
	}
	if t.Failed() {
		t.Logf("broker log:\n%s", logs)
	}
	c = mustDial(t, p.addr, connOpts{id: "keeper", expiry: 3600})
	if !c.connack.SessionPresent {
		t.Error("the good session was lost with the bad records")
	}
	r := mustDial(t, p.addr, connOpts{id: "reader", cleanStart: true})
	r.subscribe(t, 1, "#")
	got := map[string]string{}
	for _, m := range r.waitQuiet(1, 300*time.Millisecond, 10*time.Second) {
		got[m.Topic] = string(m.Payload)
	}
	if got["good/1"] != "good" {
		t.Errorf("the good retained message is gone: %v", got)
	}
	if _, ok := got["big/corrupt-me"]; ok {
		t.Errorf("the damaged retained message was served")
	}
	p.stop(t)
}

// damage flips a byte inside each occurrence of marker in the store's
// journal segments and returns how many it damaged.
func damage(t *testing.T, dir string, marker []byte) int {
	t.Helper()
	n := 0
	err := filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		switch filepath.Base(path) {
		case "db.data", "db.free", "db.free.prev", "db.redo", "LOCK":
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		found := false
		for off := 0; ; {
			i := bytes.Index(b[off:], marker)
			if i < 0 {
				break
			}
			b[off+i+len(marker)/2] ^= 0x20
			off += i + len(marker)
			found = true
			n++
		}
		if !found {
			return nil
		}
		return os.WriteFile(path, b, info.Mode().Perm())
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestLockedStore: a second broker on a store the first one holds stops at
// start, with ErrLocked in its message.
func TestLockedStore(t *testing.T) {
	bin := buildBin(t, "./cmd/kdb-mqtt")
	dir := t.TempDir()
	p := startBroker(t, bin, "-store", dir)
	cmd := exec.Command(bin, "-store", dir, "-listen", "127.0.0.1:0")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() == 0 {
			t.Fatalf("second broker: %v, want a non-zero exit\n%s", err, stderr.String())
		}
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("the second broker on a locked store did not stop")
	}
	msg := stderr.String()
	if !strings.Contains(msg, "ErrLocked") || !strings.Contains(msg, kdb.ErrLocked.Error()) {
		t.Fatalf("second broker's message lacks ErrLocked: %q", msg)
	}
	// The first one still serves.
	mustDial(t, p.addr, connOpts{id: "still-there", cleanStart: true}).close()
	p.stop(t)
}

// TestMetrics: -metrics serves kdb's Stats in the Prometheus text format,
// and the start logs the recovery report.
func TestMetrics(t *testing.T) {
	bin := buildBin(t, "./cmd/kdb-mqtt")
	dir := t.TempDir()
	p := startBroker(t, bin, "-store", dir, "-metrics", "127.0.0.1:0")
	if !regexp.MustCompile(`msg="kdb-mqtt: store recovered" store=\S+ free_list_path=created .*records_replayed=0 .*total_time=`).MatchString(p.log.String()) {
		t.Errorf("no recovery report logged at start:\n%s", p.log.String())
	}
	c := mustDial(t, p.addr, connOpts{id: "m", cleanStart: true})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range 10 {
		if err := c.publish(ctx, "m/x", 1, true, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	m := regexp.MustCompile(`msg="kdb-mqtt: metrics" url=(\S+)`).FindStringSubmatch(p.log.String())
	if m == nil {
		t.Fatalf("no metrics URL logged:\n%s", p.log.String())
	}
	resp, err := http.Get(m[1])
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	text := string(body)
	for _, re := range []string{
		`(?m)^kdb_journal_fsyncs_total [1-9]`,
		`(?m)^kdb_journal_bytes_total [1-9]`,
		`(?m)^kdb_checkpoints_total \d`,
		`(?m)^kdb_recovery_records_replayed 0$`,
		`(?m)^kdb_recovery_seconds \d`,
		`(?m)^kdb_recovery_free_list\{path="created"\} 1$`,
		`(?m)^# TYPE kdb_journal_fsyncs_total counter$`,
	} {
		if !regexp.MustCompile(re).MatchString(text) {
			t.Errorf("metrics lack %s", re)
		}
	}
	c.close()
	p.stop(t)
	if !strings.Contains(p.log.String(), `msg="kdb-mqtt: stopped"`) {
		t.Errorf("no clean stop logged")
	}

	// Reopened after the clean stop: the free list is trusted.
	p = startBroker(t, bin, "-store", dir)
	if !strings.Contains(p.log.String(), "free_list_path=trusted") {
		t.Errorf("reopen after a clean stop did not trust the free list:\n%s", p.log.String())
	}
	p.stop(t)
}
