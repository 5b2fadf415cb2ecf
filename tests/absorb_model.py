"""The table model the policy tests drive (now part of the product: `recluster.core.estimate.model`)."""

from recluster.core.estimate.model import FINGERPRINT, ModelTable, absorb_bounds, make_block

__all__ = ["FINGERPRINT", "ModelTable", "absorb_bounds", "make_block"]
