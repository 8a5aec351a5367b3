"""DLedger commitlogs (``enableDLegerCommitLog=true``): where a member keeps its files
(:mod:`.layout`), the framing the one walker reads its entries with (:mod:`.framing`), and
DLedger's own recovery of them as each release runs it (:mod:`.ledger`). The formats are in
``formats/dledger``."""
