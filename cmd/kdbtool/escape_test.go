package main

import (
	"strings"
	"testing"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/broker"
)

// forged is a name that, printed raw, would add a line to a report that
// looks like one kdbtool writes.
const forged = "x\nerror: journal: forged line\r\x1b[2K\xff"

// escapeStore builds a store whose index, destination, subscription, key,
// message ID, property and value all carry forged.
func escapeStore(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	db, err := kdb.Open(dir, &kdb.Options{SegmentSize: testSegmentSize, CheckpointInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	br, err := broker.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	b := kdb.NewBatch()
	b.Put(forged, []byte("k"+forged), []byte("v"+forged))
	b.Put("plain", []byte("k1"), []byte("v1"))
	b.Put("plain", []byte("k2"), []byte("v2"))
	b.Put("plain", []byte("k3\n"), []byte("v3"))
	if err := db.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := br.Subscribe("t"+forged, "s"+forged); err != nil {
		t.Fatal(err)
	}
	if _, err := br.Send(broker.Queue, "q"+forged, &broker.Message{ID: "id" + forged, ProducerID: "p" + forged,
		Properties: map[string]string{"k" + forged: "v" + forged}, Body: []byte("b" + forged)}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

// requireNoForgedLine fails if out holds a line (or a carriage return, an
// escape sequence or an invalid byte) that only a raw name could put there.
func requireNoForgedLine(t *testing.T, what, out string) {
	t.Helper()
	for _, bad := range []string{"\nerror: journal: forged", "\r", "\x1b", "\xff"} {
		if strings.Contains(out, bad) {
			t.Errorf("%s: output holds %q raw:\n%s", what, bad, out)
		}
	}
}

func TestInspect_EscapesNames(t *testing.T) {
	t.Parallel()
	dir := escapeStore(t)
	code, out, errs := runTool(t, "inspect", dir)
	if code != 0 {
		t.Fatalf("inspect: exit %d: %s", code, errs)
	}
	requireNoForgedLine(t, "inspect", out)
	q := strings.Trim(esc(forged), `"`)
	for _, want := range []string{"  plain: 3 keys\n", "  \"" + q + "\": 1 keys\n", "queue \"q" + q + "\": 1 messages",
		"topic \"t" + q + "\":", "subscription \"s" + q + "\": 0 pending"} {
		if !strings.Contains(out, want) {
			t.Errorf("inspect: no %q in\n%s", want, out)
		}
	}
	// --json stays exact.
	code, m := runJSON(t, "inspect", "--json", dir)
	if code != 0 {
		t.Fatalf("inspect --json: exit %d", code)
	}
	found := false
	for _, ix := range jget(t, m, "store.indexes").([]any) {
		if ix.(map[string]any)["name"] == strings.ToValidUTF8(forged, "\uFFFD") {
			found = true
		}
	}
	if !found {
		t.Errorf("inspect --json: the index name is not exact: %v", jget(t, m, "store.indexes"))
	}
}

func TestDump_EscapesNames(t *testing.T) {
	t.Parallel()
	dir := escapeStore(t)
	code, out, errs := runTool(t, "dump", "--index", forged, "--values", dir)
	if code != 0 {
		t.Fatalf("dump index: exit %d: %s", code, errs)
	}
	requireNoForgedLine(t, "dump --index", out)
	if n := strings.Count(out, "\n"); n != 1 {
		t.Errorf("dump --index: %d lines, want 1:\n%s", n, out)
	}
	code, out, errs = runTool(t, "dump", "--queue", "q"+forged, "--values", dir)
	if code != 0 {
		t.Fatalf("dump queue: exit %d: %s", code, errs)
	}
	requireNoForgedLine(t, "dump --queue", out)
	if n := strings.Count(out, "\n"); n != 1 || !strings.Contains(out, `"id`) || !strings.Contains(out, "producer \"p") {
		t.Errorf("dump --queue: %d lines, want 1:\n%s", n, out)
	}
	// Plain names and values stay as they are; a following key that is not
	// plain is offered in hex.
	code, out, _ = runTool(t, "dump", "--index", "plain", "--values", "--limit", "1", dir)
	if code != 0 || out != "\"k1\"\tv1\n... more: --start k2\n" {
		t.Errorf("dump plain: exit %d\n%q", code, out)
	}
	// A next key that is not plain is offered in hex, and that works.
	code, out, _ = runTool(t, "dump", "--index", "plain", "--limit", "2", dir)
	if code != 0 || !strings.HasSuffix(out, "... more: --hex --start 6b330a\n") {
		t.Errorf("dump plain --limit 2: exit %d\n%q", code, out)
	}
	code, out, _ = runTool(t, "dump", "--index", "plain", "--hex", "--start", "6b330a", dir)
	if code != 0 || out != "6b330a\t2 bytes\n" {
		t.Errorf("dump --hex --start 6b330a: exit %d\n%q", code, out)
	}
	code, m := runJSON(t, "dump", "--json", "--index", forged, "--values", dir)
	keys, _ := m["keys"].([]any)
	if code != 0 || len(keys) != 1 || keys[0].(map[string]any)["key_hex"] != "6b"+hexOf(forged) {
		t.Errorf("dump --json: exit %d, %v", code, m)
	}
}

func hexOf(s string) string {
	const digits = "0123456789abcdef"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		b.WriteByte(digits[s[i]>>4])
		b.WriteByte(digits[s[i]&15])
	}
	return b.String()
}

func TestEsc(t *testing.T) {
	for in, want := range map[string]string{
		"orders":     "orders",
		"a b/c-ü":    "a b/c-ü",
		"":           `""`,
		"a\nb":       `"a\nb"`,
		"\"quoted\"": `"\"quoted\""`,
		"tab\there":  `"tab\there"`,
		"\xff":       `"\xff"`,
		"rtl\u202e":  `"rtl\u202e"`,
	} {
		if got := esc(in); got != want {
			t.Errorf("esc(%q) = %s, want %s", in, got, want)
		}
	}
}
