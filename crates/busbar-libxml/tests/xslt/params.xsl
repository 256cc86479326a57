<?xml version="1.0"?>
<!-- Global parameters: a string, a default value, and one used in a predicate. -->
<xsl:stylesheet version="1.0" xmlns:xsl="http://www.w3.org/1999/XSL/Transform">
  <xsl:output method="text"/>
  <xsl:param name="region" select="'none'"/>
  <xsl:param name="symbol" select="'IBM'"/>
  <xsl:param name="note"/>
  <xsl:template match="/">
    <xsl:value-of select="concat('region=', $region, ' note=[', $note, '] ')"/>
    <xsl:value-of select="concat($symbol, ' orders: ', count(//order[symbol = $symbol]))"/>
    <xsl:text>&#10;</xsl:text>
  </xsl:template>
</xsl:stylesheet>
