//go:build cuda

package replay

// Built with the cuda build tag, the command has the "cuda" backend too, and uses it by default.
import _ "github.com/allocscope/allocscope/internal/replay/backend/cuda"
