"""Stage (a), clean: ``stage`` reads every input, normalises, splits into sentences, filters and drops exact
duplicates into ``sentences/corpus.jsonl``; ``resume`` keeps the resume points an interrupted run reads on from;
``seen`` holds the digests of the sentences kept, for the dedupe."""
