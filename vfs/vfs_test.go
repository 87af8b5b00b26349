package vfs

import "testing"

func TestOp_StringAndMutating(t *testing.T) {
	mutating := map[Op]bool{
		OpWrite: true, OpSync: true, OpTruncate: true, OpAllocate: true,
		OpRemove: true, OpRename: true, OpMkdir: true, OpSyncDir: true,
	}
	seen := map[string]bool{}
	for op := OpOpen; op <= OpStat; op++ {
		s := op.String()
		if s == "op?" || seen[s] {
			t.Errorf("Op %d: String() = %q (missing or duplicate)", op, s)
		}
		seen[s] = true
		if op.Mutating() != mutating[op] {
			t.Errorf("%v.Mutating() = %v", op, op.Mutating())
		}
	}
	if Op(0).String() != "op?" || Op(200).String() != "op?" {
		t.Error("out-of-range Op has a name")
	}
}
