"""What a method adds to the reused layers: Houlsby ``adapters``, ``lora`` (through peft), ``extend`` (the source's
vocabulary kept and the target's pieces appended) and ``extensions`` (a method's own modules, named by the method
table, so the generic model code knows no method by name)."""
