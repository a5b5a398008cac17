package render

import (
	"encoding/json"
	"io"

	"github.com/allocscope/allocscope/internal/analysis/internal/schema"
)

// JSON writes the report as indented JSON.
func JSON(w io.Writer, r *schema.Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}
