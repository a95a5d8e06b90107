"""Allocation pressure for the tests of views that outlive their variable."""


def churn(scope, nbytes, count=4):
    """Makes count tensors of nbytes in scope, every byte 0xFF: a buffer freed
    while a view still showed it would be handed to one of them and overwritten,
    which the view's values then show."""
    for i in range(count):
        v = scope.var(f"churn{i}")
        v.resize("uint8", (nbytes,))
        v.numpy()[:] = 0xFF
