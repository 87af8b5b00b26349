package main

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kdb-project/kdb/internal/checksum"
	"github.com/kdb-project/kdb/pagefile"
	"github.com/kdb-project/kdb/vfs"
)

// lieFreeFile rewrites dir's db.free (FORMAT.md §2.5) keeping its
// store ID, checkpoint ID and page count, so that Open trusts it, but
// listing every data page [3, page count) as free, the live ones included.
func lieFreeFile(t *testing.T, dir string) {
	t.Helper()
	name := filepath.Join(dir, "db.free")
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	le := binary.LittleEndian
	pageCount := le.Uint64(b[48:])
	out := make([]byte, 72+16)
	copy(out[8:56], b[8:56])
	le.PutUint64(out[56:], 1)
	le.PutUint64(out[64:], pageCount-3)
	le.PutUint64(out[72:], 3)
	le.PutUint64(out[80:], pageCount-3)
	le.PutUint64(out[0:], checksum.Sum64(out[8:]))
	if err := os.WriteFile(name, out, 0o600); err != nil {
		t.Fatal(err)
	}
}

// problemsOf returns the problems of a decoded inspect/check/repair
// document as "severity area: message" lines.
func problemsOf(t *testing.T, m map[string]any, field string) []string {
	t.Helper()
	var out []string
	ps, _ := m[field].([]any)
	for _, p := range ps {
		pm := p.(map[string]any)
		out = append(out, pm["severity"].(string)+" "+pm["area"].(string)+": "+pm["message"].(string))
	}
	return out
}

func hasProblem(ps []string, prefix, substr string) bool {
	for _, p := range ps {
		if strings.HasPrefix(p, prefix) && strings.Contains(p, substr) {
			return true
		}
	}
	return false
}

// TestFreeListLie_InspectCheckRepair: a db.free that passes every check
// Open makes but lists live pages. inspect and check report it as an error
// of the free list (not of the index), repair's dry run advises what fixes
// it, and repair --apply fixes it.
func TestFreeListLie_InspectCheckRepair(t *testing.T) {
	t.Parallel()
	dir := makeStore(t, 500)
	lieFreeFile(t, dir)

	code, m := runJSON(t, "inspect", "--json", dir)
	ps := problemsOf(t, m, "problems")
	if code != exitProblems || !hasProblem(ps, "error free_list", "in use as free") ||
		!hasProblem(ps, "error free_list", "recover --force-scan") || !hasProblem(ps, "error free_list", "repair --apply") {
		t.Fatalf("inspect: exit %d, problems %q", code, ps)
	}
	if n := jget(t, m, "free_list.lied_pages").(float64); n == 0 || jget(t, m, "free_list.first_lied_page").(float64) < 3 {
		t.Fatalf("inspect: free_list %v", m["free_list"])
	}
	_, text, _ := runTool(t, "inspect", dir)
	if !strings.Contains(text, "LIES") {
		t.Fatalf("inspect text:\n%s", text)
	}

	code, m = runJSON(t, "check", "--json", dir)
	ps = problemsOf(t, m, "problems")
	if code != exitProblems || m["ok"] != false || !hasProblem(ps, "error free_list", "in use as free") {
		t.Fatalf("check: exit %d, %v", code, m)
	}
	for _, p := range ps {
		if !strings.HasPrefix(p, "error free_list") {
			t.Errorf("check: other problem %q", p)
		}
	}
	if jget(t, m, "index.Keys").(float64) == 0 {
		t.Errorf("check: index not checked: %v", m["index"])
	}

	before := snapshotFiles(t, dir)
	code, m = runJSON(t, "repair", "--json", dir)
	acts, _ := m["actions"].([]any)
	if code != exitProblems || len(acts) != 1 || len(m["unfixable"].([]any)) != 0 {
		t.Fatalf("repair dry run: exit %d, %v", code, m)
	}
	a := acts[0].(map[string]any)
	if a["action"] != actRebuildFreeList || !strings.Contains(a["detail"].(string), "recover --force-scan") {
		t.Fatalf("repair dry run action %v", a)
	}
	_, text, _ = runTool(t, "repair", dir)
	if !strings.Contains(text, "--apply") || strings.Contains(text, "--rebuild-index") {
		t.Fatalf("repair dry run text:\n%s", text)
	}
	requireSameFiles(t, before, snapshotFiles(t, dir))

	code, m = runJSON(t, "repair", "--json", "--apply", dir)
	if code != exitOK || m["ok"] != true || jget(t, m, "after.ok") != true || jget(t, m, "recovery.free_list_path") != "scanned" {
		t.Fatalf("repair --apply: exit %d, %v", code, m)
	}
	code, m = runJSON(t, "inspect", "--json", dir)
	if code != exitOK || jget(t, m, "free_list.lied_pages") != float64(0) || jget(t, m, "free_list.open_would") != "trusted" {
		t.Fatalf("inspect after repair: exit %d, %v", code, m)
	}
	if code, m = runJSON(t, "check", "--json", dir); code != exitOK || m["ok"] != true {
		t.Fatalf("check after repair: exit %d, %v", code, m)
	}
}

// TestFreeListLie_Recover: recover on a lying db.free reports the lie
// (free_list_lied and the first page), writes none of the pages, and
// leaves a store that check passes and that recovers without a lie.
func TestFreeListLie_Recover(t *testing.T) {
	t.Parallel()
	dir := makeStore(t, 500)
	lieFreeFile(t, dir)
	code, m := runJSON(t, "recover", "--json", dir)
	if code != exitOK || m["free_list_path"] != "trusted" || m["free_list_lied"] != true ||
		m["free_list_lied_page"].(float64) < 3 || m["free_list_lies"].(float64) == 0 || m["free_list_lie_reason"] == "" {
		t.Fatalf("recover: exit %d, %v", code, m)
	}
	if code, m := runJSON(t, "check", "--json", dir); code != exitOK || m["ok"] != true {
		t.Fatalf("check after recover: exit %d, %v", code, m)
	}
	code, out, _ := runTool(t, "recover", dir)
	if code != exitOK || strings.Contains(out, "LIED") {
		t.Fatalf("second recover: exit %d\n%s", code, out)
	}

	dir = makeStore(t, 500)
	lieFreeFile(t, dir)
	code, out, _ = runTool(t, "recover", dir)
	if code != exitOK || !strings.Contains(out, "free list LIED: ") || !strings.Contains(out, "none was written") {
		t.Fatalf("recover (text): exit %d\n%s", code, out)
	}
}

// TestFreeListLie_BeyondCutEnd: the pages a free list lists beyond the end
// of a cut db.data are missing, not in use: the free_list problem says so
// (it said "lists N pages in use as free"), and does not offer Open's
// proof before use, which never runs on a store Open refuses.
func TestFreeListLie_BeyondCutEnd(t *testing.T) {
	t.Parallel()
	dir := makeStore(t, 6000)
	in, err := pagefile.Inspect(vfs.OS, dir)
	if err != nil {
		t.Fatal(err)
	}
	var first pagefile.PageID
	for _, fi := range in.FreeFiles {
		if fi.Name == "db.free" && fi.MatchesMeta && len(fi.Ranges) > 0 {
			first = fi.Ranges[0].Start
		}
	}
	if first == 0 {
		t.Fatalf("db.free lists no free page: the test needs one")
	}
	if err := os.Truncate(filepath.Join(dir, "db.data"), int64(first)*int64(in.PageSize)); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"inspect", "check"} {
		_, m := runJSON(t, cmd, "--json", dir)
		var msg string
		for _, p := range m["problems"].([]any) {
			if p := p.(map[string]any); p["area"] == "free_list" {
				msg, _ = p["message"].(string)
			}
		}
		if strings.Contains(msg, "in use") || !strings.Contains(msg, "beyond the end of db.data") || strings.Contains(msg, "prove each page before use") {
			t.Errorf("%s: free_list problem %q; want the pages said to be beyond the end of db.data, not in use", cmd, msg)
		}
		if cmd == "inspect" && jget(t, m, "free_list.beyond_end_lied_pages") != jget(t, m, "free_list.lied_pages") {
			t.Errorf("inspect: beyond_end_lied_pages %v, lied_pages %v: want them equal", jget(t, m, "free_list.beyond_end_lied_pages"), jget(t, m, "free_list.lied_pages"))
		}
	}
	code, out, _ := runTool(t, "inspect", dir)
	if code != exitProblems || !strings.Contains(out, "listed pages are beyond the end of db.data") {
		t.Errorf("inspect: exit %d, want 1 saying the listed pages are beyond the end of db.data:\n%s", code, out)
	}
}

// TestFreeListLie_LiveAndDamagedPagesIsAnError: a db.free that lists a
// damaged page and live pages too is a lie about pages in use, an error
// (exit 1), not the warning that a list of damaged pages only gets.
func TestFreeListLie_LiveAndDamagedPagesIsAnError(t *testing.T) {
	t.Parallel()
	dir, _ := storeWithDamagedFreePage(t)
	lieFreeFile(t, dir)
	code, m := runJSON(t, "inspect", "--json", dir)
	lies, damaged := jget(t, m, "free_list.lied_pages").(float64), jget(t, m, "free_list.damaged_lied_pages").(float64)
	if damaged == 0 || lies <= damaged {
		t.Fatalf("inspect: %v lied pages, %v of them damaged: the test needs both damaged and live ones", lies, damaged)
	}
	ps := problemsOf(t, m, "problems")
	if code != exitProblems || !hasProblem(ps, "error free_list", "") || hasProblem(ps, "warning free_list", "damaged pages") {
		t.Fatalf("inspect: exit %d, problems %q; want exit 1 and a free_list error", code, ps)
	}
}
